"""One module per memory system; each is registered by name in memory/registry.py."""
