"""The engine room: from what a caller names to the score frame.

``params`` (how an inspection reads) → ``resolve`` (names → models, hypotheses,
measures, records, unit sets) → ``inspection`` (the streaming block loop, early
stopping) over ``states`` (one measure state per model, measure and unit set) →
``frames`` and ``provenance`` (the score frame and what it came from); ``run`` is a
background inspection's handle, ``progress_bar`` its terminal bar.
"""
