"""Real CUDA-extension sdists from the public index, pinned by sha256 and fetched once into the cache by the
tool's own requirement fetch (wheelci.config.fetch: the index pip is pointed at, its digest checked).

The corpus (tests/test_corpus.py) is twelve of the most-used PyTorch CUDA extensions; the real builds
(tests/test_real_projects*.py) take a few of them and a few more."""

from __future__ import annotations

import os
from pathlib import Path

from wheelci.config.fetch import fetch
from wheelci.util.cache import cache_dir
from wheelci.util.digest import sha256_file

# requirement -> the sha256 of its sdist on the index (a different file is refused)
PINNED = {
    "torch-scatter==2.1.2": "69b3aa435f2424ac6a1bfb6ff702da6eb73b33ca0db38fb26989c74159258e47",
    "torch-sparse==0.6.18": "2f14c510a6e93f404c6ea357210615b3c15a71731f9dbd86f25434e34fb5a741",
    "torch-cluster==1.6.3": "78d5a930a5bbd0d8788df8c6d66addd68d6dd292fe3edb401e3dacba26308152",
    "torch-spline-conv==1.2.2": "ed45a81da29f774665dbdd4709d7e534cdf16d2e7006dbd06957f35bd09661b2",
    "causal-conv1d==1.7.0": "3202758494eaa7b597ce1c282dfa188889506bfcb92cad3c407d26736bfcd32b",
    "mamba-ssm==2.3.2.post1": "104cc47e9101e5401a675fa2b784f2952b9b037f3b1dd83b5ac544394e95d028",
    "flash-attn==2.8.3.post2": "d0f9f0b08a986cdeadbffcf5ec8b3a8f514366c68ad1853d3ab061bc83cc340b",
    "xformers==0.0.35": "f7fc183a58e4bf0e2ae339a18fb1b1d4a37854c0f2545b4f360fef001646ab76",
    "natten==0.21.7": "8417236b74db079b2d23899ec8f77514fb2dc73d4bbd6b346a45b6967fc05ffb",
    "deepspeed==0.19.8": "9e491abd0827ea5c389dd702e15e11e13d83d904bac4a20d6c2a4cb37207a9af",
    "torchsort==0.1.10": "416a7dd2ab88332b27e98318d7fb2e0243b9fb6f1fffcf77760d63103d70dd04",
    "chamferdist==1.0.3": "ac9d3a723329d230bcdd5ee8a01f13632ebae31b2ae221116579637ed57a4567",
    # real builds beyond the corpus
    "spatial-correlation-sampler==0.5.0": "872d720d3740f3caf0d15620af5180af8a1971568f9c7cda3664757262688d11",
    "torch-linear-assignment==0.0.6": "6aad76d3c976b40cf1572e81bed8aedbeafdacb817f290e137c7a76ad58fcd23",
}


def requirement_of(project: str) -> str:
    return next(r for r in PINNED if r.split("==")[0] == project)


def sdist(project: str) -> Path:
    """The pinned sdist of `project`: the cached file where it has the pinned digest (no request), else
    fetched from the index and checked."""
    requirement = requirement_of(project)
    name, version = requirement.split("==")
    cached = cache_dir("sdists", PINNED[requirement][:32], f"{name.replace('-', '_')}-{version}.tar.gz")
    if cached.is_file() and sha256_file(cached) == PINNED[requirement]:
        return cached
    got = fetch(requirement, os.environ)
    assert got.sha256 == PINNED[requirement], f"{got.filename}: the index serves another file than the pinned one"
    return got.path
