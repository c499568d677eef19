"""ext3: ext2 plus a journal; data=journal|ordered|writeback is a mount option."""

from fsmatrix.agent.storage.filesystems._ext import ext_filesystem

FILESYSTEM = ext_filesystem("ext3")
