"""The data sources, the top of utils/data/: where a run's images or videos come from (the embedded digits and moving
digits, synthetic images, image and video folders, list files, the Hub, save_to_disk folders, streamed shards),
each one class answering the same protocol (protocol.py), picked once per run by catalog.py."""
