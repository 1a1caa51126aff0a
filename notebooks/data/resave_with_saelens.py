"""Re-save a SAELens-layout SAE with the real sae-lens, for notebook 11 to load.

Run with the side environment's python (``make saelens-env``; sae-lens is not a
dependency of dni_lab)::

    .dni_cache/saelens-venv/bin/python notebooks/data/resave_with_saelens.py \
        notebooks/data/sae_dni_lab notebooks/data/sae_saelens

``SRC`` (``sae_dni_lab/``) is notebook 11's quick SAE as ``dl.features.save`` writes it
(cells 1 and 3, quick, then ``dl.features.save(res.features, SRC)``); sae-lens loads it
(``SAE.load_from_disk``) and writes it again with its own ``save_model``, so ``DST``
(``sae_saelens/``) holds files that sae-lens itself wrote (its ``cfg.json`` names the
sae-lens version). The notebook compares the two stored files with each other, never
with the SAE it trains: another CPU's float kernels train a different SAE, so regenerate
both together, from one run.
"""

import sys

from sae_lens import SAE

src, dst = sys.argv[1], sys.argv[2]
sae = SAE.load_from_disk(src)
sae.save_model(dst)
print(f"sae-lens re-saved {type(sae).__name__} ({sae.cfg.d_in} -> {sae.cfg.d_sae}) into {dst}")
