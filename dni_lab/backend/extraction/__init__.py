"""The model room: models, their layers and the behaviors read from them.

``models`` (``Model``: a module plus ``encode``/``symbols``, hooks, widths) and
``module_names`` (a module's layer names) → ``extract`` (``Extractor``: unit behaviors
per block, on the chosen device) with ``behavior_memo`` (recent blocks served again)
and ``sparse_block`` (a sparse feature set's latents); ``behaviors`` is the service
verify, examples and the panels read one unit's behaviors from.
"""
