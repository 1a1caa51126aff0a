"""The hypothesis room: hypotheses, what their outputs depend on, and their cache.

``hypotheses`` (the protocol, kinds, ``hypothesis_block``: a block's signals aligned
to symbols) → ``fingerprint`` / ``fingerprint_code`` (what an output depends on,
hashed) → ``cache`` (memory LRU and disk store) within ``cache_budget`` (the disk's
byte budget).
"""
