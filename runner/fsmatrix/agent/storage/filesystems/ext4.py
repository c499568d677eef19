"""ext4: extents, delayed allocation, flex_bg, metadata checksums."""

from fsmatrix.agent.storage.filesystems._ext import ext_filesystem

FILESYSTEM = ext_filesystem("ext4")
