"""ext2: no journal (the seeds' baseline)."""

from fsmatrix.agent.storage.filesystems._ext import ext_filesystem

FILESYSTEM = ext_filesystem("ext2")
