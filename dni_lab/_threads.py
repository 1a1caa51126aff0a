"""The thread policy, set before torch loads its OpenMP runtime.

torch's CPU kernels run on OpenMP threads. libgomp's threads spin for 300,000
iterations while they wait for the next parallel region; beside busy processes a
spinning thread burns the time slice its partner needs to finish the region. The merged
probe's solver runs thousands of short regions per fit, so it suffered most. Ten Newton
steps of the demo's probe (two threads, two cores), and the probe of
``bench_probes.py`` (200 fold models over 76,120 symbols, two runs each), alone:

=============================  =======  =====================  ================
waiting                        alone    beside two busy loops  bench_probes
=============================  =======  =====================  ================
spin 300,000 (the default)     12.3 s   30.7 s                 18.0 s, 18.8 s
sleep (``OMP_WAIT_POLICY``)    12.3 s   20.3 s                 —
spin 10,000 (this policy)      12.1 s   19.5 s                 18.0 s, 19.1 s
spin 1,000                     11.4 s   18.7 s                 20.0 s, 19.9 s
one thread instead of two      19.8 s   31.8 s                 —
=============================  =======  =====================  ================

(sleeping at once cost the whole demo 3 to 4 s alone, in its many shorter waits.) The
probe's solve has since moved to single-threaded workers (``measures/_column_pool.py``),
which wait at no barrier; the policy still serves torch's other parallel work. So
waiting threads spin briefly, then sleep: ``GOMP_SPINCOUNT=10000``, nearly all of the
gain under load at no cost alone.

libgomp reads the variable once, when torch loads it: a process that imported torch
before ``dni_lab`` keeps its own policy, and a value already in the environment (or an
``OMP_WAIT_POLICY``, which takes precedence) is left alone. Other OpenMP runtimes
ignore it.
"""

from __future__ import annotations

import os

SPINCOUNT = os.environ.setdefault("GOMP_SPINCOUNT", "10000")
