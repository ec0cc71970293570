"""--streaming: this process's share of a stream of shards (rows.py), read a block ahead in a thread
(blocks.py), and the loader that deals an epoch's batches to its workers and keeps its position (loader.py).
The source that opens the shards is utils/data/sources/streamed.py."""
