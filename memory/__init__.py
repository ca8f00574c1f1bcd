"""memeval's memory systems: a Django-free library.

Every arm implements :class:`memory.base.MemorySystem` and is registered by name in
:mod:`memory.registry`. LLM calls go through :mod:`memory.llm`, embeddings through :mod:`memory.embed`.
"""
