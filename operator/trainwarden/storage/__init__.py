"""Where checkpoints live: recognizing and pruning them on a filesystem."""
