"""PEP 825 wheel variants: labels, `.dist-info/variant.json` and a release's variants file.

A variant wheel is an ordinary wheel plus a label as the last part of its file name
(`tiny_ext-0.1.0-cp311-cp311-manylinux_2_34_x86_64-cu130.whl`) and a `variant.json` that maps the label
to properties; the index serves `{name}-{version}-variants.json`, the union of a release's labels, and
an installer with variant support picks the best variant the machine supports, else the plain wheel.

The documents follow what variantlib 0.2.2 writes (schema v0.2.0, which uv 0.13.9 reads). uv selects
variants only through its built-in providers, and uses its nvidia one only when the metadata names
NVIDIA's plugin exactly as PROVIDER does; any other spelling is "an unsupported wheel variant provider"
and uv takes the plain wheel.

What a CUDA build declares (namespace `nvidia`):
- `cuda_version_lower_bound`: X.Y of the toolkit it was built with: the driver must support it.
- `sm_arch`: `<major><minor>_real` for each arch of its list, when the list has no PTX. The provider
  offers a GPU only the real archs of its own major up to its minor (CUDA's binary compatibility), so
  the list is exact there and a GPU the wheel has no code for gets the plain wheel, not a variant that
  fails at its first kernel. PTX runs on GPUs newer than any arch listed, which these values cannot say:
  a list with PTX (the matrix's defaults) declares no sm_arch. An arch-specific entry (`9.0a`) counts
  as its arch.

Pure functions, except add_variant and read_wheel, which read and write wheel bytes through
ci.wheel.zipread.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from wheelci.errors import CiError
from wheelci.wheel.names import VARIANT_LABEL, WheelName, cuda_tag, escape, is_version, normalize
from wheelci.wheel.rewrite import rewrite
from wheelci.wheel.zipread import WheelArchive


SCHEMA = "https://variants-schema.wheelnext.dev/v0.2.0.json"  # variantlib 0.2.2's; uv 0.13.9 reads it
NVIDIA = "nvidia"
# Exactly what uv's built-in nvidia provider answers to (see the module docstring).
PROVIDER = {"requires": ["nvidia-variant-provider>=0.0.1,<1.0.0"],
            "plugin-api": "nvidia_variant_provider.plugin:NvidiaVariantPlugin"}
FILE_SUFFIX = "-variants.json"
MEMBER = "variant.json"  # in the wheel's .dist-info
DOC_CAP = 1 << 20  # a variant.json or variants file is a few hundred bytes; refuse anything huge

_KEYS = {"$schema", "default-priorities", "providers", "variants"}
_IDENT = re.compile(r"[a-z0-9_]+")  # namespaces and feature names
_VALUE = re.compile(r"[a-z0-9_.]+")
_FILE = re.compile(r"([A-Za-z0-9](?:[A-Za-z0-9._]*[A-Za-z0-9])?)-([^-/]+)-variants\.json")
_ROOT = re.compile(r"cu\d+|cpu")

Properties = dict[str, dict[str, list[str]]]  # namespace -> feature -> values


@dataclass(frozen=True)
class VariantDoc:
    """The parts of a variant.json or a variants file that must agree across a release."""

    priorities: dict[str, Any]  # default-priorities
    providers: dict[str, dict[str, Any]]
    variants: dict[str, Properties] = field(default_factory=dict)  # label -> properties

    def to_json(self) -> dict[str, Any]:
        return {"$schema": SCHEMA, "default-priorities": self.priorities, "providers": self.providers,
                "variants": {label: self.variants[label] for label in sorted(self.variants)}}


# ---------------------------------------------------------------- what a build declares


def sm_arch(arch_list: str) -> list[str] | None:
    """`8.0;9.0` -> ['80_real', '90_real']; None when the list has PTX (see the module docstring)."""
    entries = [e for e in re.split(r"[;,\s]+", arch_list.strip()) if e]
    if not entries or any(e.upper().endswith("+PTX") for e in entries):
        return None
    values = []
    for e in entries:
        m = re.fullmatch(r"(\d+)\.(\d+)[af]?", e)
        if m is None:
            raise CiError(f"bad CUDA arch {e!r} in {arch_list!r} (want e.g. 8.6, 9.0a or 9.0+PTX)")
        values.append((int(m[1]), int(m[2])))
    return [f"{major}{minor}_real" for major, minor in sorted(set(values))]


def cuda_label(cuda: str, stable_major: int | None = None) -> str:
    """cu130 for a CUDA 13.0 build; cu13 for a stable-ABI wheel, which serves its whole CUDA major."""
    return cuda_tag(str(stable_major) if stable_major else cuda, major=bool(stable_major))


def cuda_variant(cuda: str, arch_list: str, stable_major: int | None = None) -> VariantDoc:
    """The variant.json of a CUDA build: its label and the nvidia provider's properties."""
    m = re.fullmatch(r"(\d+)\.(\d+)(?:\.\d+)?", cuda)
    if m is None:
        raise CiError(f"CUDA version {cuda!r}: want X.Y")
    props: dict[str, list[str]] = {"cuda_version_lower_bound": [f"{int(m[1])}.{int(m[2])}"]}
    archs = sm_arch(arch_list)
    if archs:
        props["sm_arch"] = archs
    return VariantDoc({"namespace": [NVIDIA]}, {NVIDIA: dict(PROVIDER)},
                      {cuda_label(cuda, stable_major): {NVIDIA: props}})


def dumps(doc: VariantDoc) -> bytes:
    """The file's bytes: sorted keys, so the same release always gives the same file (and hash)."""
    return (json.dumps(doc.to_json(), indent=2, sort_keys=True) + "\n").encode()


# ---------------------------------------------------------------- reading


def parse(data: bytes | str, where: str) -> VariantDoc:
    """A variant.json or variants file, checked as variantlib checks it; every problem is one CiError."""
    if len(data) > DOC_CAP:
        raise CiError(f"{where}: over {DOC_CAP >> 10} KiB; not a variants document")
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise CiError(f"{where}: not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise CiError(f"{where}: not a JSON object")
    if unknown := sorted(set(doc) - _KEYS):
        raise CiError(f"{where}: unknown key {unknown[0]!r}")
    prio, providers, variants = doc.get("default-priorities"), doc.get("providers", {}), doc.get("variants", {})
    order = prio.get("namespace") if isinstance(prio, dict) else None
    if not (isinstance(prio, dict) and isinstance(order, list) and order
            and all(isinstance(n, str) and _IDENT.fullmatch(n) for n in order)):
        raise CiError(f"{where}: default-priorities.namespace must be a list of namespaces")
    if not (isinstance(providers, dict) and all(isinstance(p, dict) for p in providers.values())):
        raise CiError(f"{where}: providers must map namespaces to tables")
    if set(order) != set(providers):
        raise CiError(f"{where}: default-priorities.namespace {sorted(order)} and providers "
                      f"{sorted(providers)} name different namespaces")
    if not isinstance(variants, dict):
        raise CiError(f"{where}: variants must map labels to properties")
    for label, props in variants.items():
        if not VARIANT_LABEL.fullmatch(label):
            raise CiError(f"{where}: variant label {label!r} is not 1-16 characters of 0-9, a-z, _ and .")
        _check_properties(props, providers, f"{where}: variant {label}")
        if (label == "null") != (not props):
            raise CiError(f"{where}: the label null is for the variant with no properties, and only for it")
    return VariantDoc(prio, providers, variants)


def _check_properties(props: object, providers: dict[str, dict[str, Any]], where: str) -> None:
    if not isinstance(props, dict):
        raise CiError(f"{where}: properties must be a table of namespaces")
    for ns, features in props.items():
        if ns not in providers:
            raise CiError(f"{where}: namespace {ns!r} has no provider")
        if not isinstance(features, dict) or not all(isinstance(f, str) and _IDENT.fullmatch(f) for f in features):
            raise CiError(f"{where}: {ns} must map feature names to lists of values")
        for feature, values in features.items():
            if not (isinstance(values, list) and values
                    and all(isinstance(v, str) and _VALUE.fullmatch(v) for v in values)):
                raise CiError(f"{where}: {ns} :: {feature} must be a non-empty list of values (0-9, a-z, _ and .)")


def parse_wheel_doc(data: bytes | str, label: str | None, where: str) -> VariantDoc:
    """A wheel's variant.json: exactly one variant, the label its file name carries (None, no label: refused)."""
    doc = parse(data, where)
    if list(doc.variants) != [label]:
        raise CiError(f"{where}: names variant(s) {', '.join(sorted(doc.variants)) or 'none'}; the file name "
                      f"says {label}")
    return doc


def describe(props: Properties) -> str:
    """nvidia :: cuda_version_lower_bound :: 13.0, ... (PEP 825's spelling), for messages."""
    return ", ".join(f"{ns} :: {f} :: {v}" for ns in sorted(props) for f in sorted(props[ns])
                     for v in props[ns][f]) or "no properties"


# ---------------------------------------------------------------- a release's variants file


def variants_filename(distribution: str, version: str) -> str:
    """`{name}-{version}-variants.json`, the name normalized as wheel file names are."""
    return f"{escape(distribution).lower()}-{version}{FILE_SUFFIX}"


def parse_variants_filename(filename: str) -> tuple[str, str] | None:
    """(normalized project, version) of a variants file name, or None."""
    m = _FILE.fullmatch(filename)
    return (normalize(m[1]), m[2]) if m and is_version(m[2]) else None


def merge(release: str, wheels: Iterable[tuple[str, VariantDoc]]) -> VariantDoc:
    """The variants file of one release from its variant wheels' documents (file name, doc).

    Refused (CiError): a label used with different properties, and wheels whose providers or
    priorities differ (PEP 825 lets a tool require those to be equal; ours always are)."""
    merged: VariantDoc | None = None
    seen: dict[str, str] = {}  # label -> the wheel that defined it
    for filename, doc in wheels:
        if merged is None:
            merged = VariantDoc(doc.priorities, doc.providers, {})
        elif (doc.priorities, doc.providers) != (merged.priorities, merged.providers):
            raise CiError(f"{release}: the variant wheels disagree on providers or priorities "
                          f"({filename} and {seen[next(iter(seen))]})")
        for label, props in doc.variants.items():
            if label in merged.variants and merged.variants[label] != props:
                raise CiError(f"{release}: variant label {label} is used twice with different properties: "
                              f"{describe(merged.variants[label])} in {seen[label]}, {describe(props)} in {filename}")
            merged.variants.setdefault(label, props)
            seen.setdefault(label, filename)
    if merged is None:
        raise CiError(f"{release}: no variant wheels")
    return merged


def contradiction(given: VariantDoc, wheels: Iterable[tuple[str, VariantDoc]]) -> str | None:
    """What in a variants file the release's wheels contradict, or None. Labels without a wheel here
    contradict nothing (the wheels may be served elsewhere)."""
    for filename, doc in wheels:
        if (doc.priorities, doc.providers) != (given.priorities, given.providers):
            return f"{filename} declares other providers or priorities"
        for label, props in doc.variants.items():
            if label not in given.variants:
                return f"it does not list {filename}'s label {label}"
            if given.variants[label] != props:
                return f"it says {label} is {describe(given.variants[label])}; {filename} says {describe(props)}"
    return None


def root_label(version: str) -> str | None:
    """The PyTorch-style index root a local-labelled build belongs to: 0.1.0+pt2.13.0.cu130 -> cu130,
    0.1.0+cu13 -> cu13, 0.1.0+pt2.13.0.cpu -> cpu; None for a version whose label names no build."""
    local = version.partition("+")[2]
    last = local.rsplit(".", 1)[-1].lower()
    return last if local and _ROOT.fullmatch(last) else None


def plain_name(name: WheelName) -> str:
    """The wheel's file name without its label: what installers without PEP 825 accept."""
    return name.with_(variant=None).filename


# ---------------------------------------------------------------- wheel bytes


def read_wheel(wa: WheelArchive) -> VariantDoc:
    """The variant.json of an open variant wheel (ci.wheel.zipread.WheelArchive), checked against its
    file name's label; CiError when it has none or it disagrees."""
    label = wa.name.variant
    member = f"{wa.dist_info}/{MEMBER}"
    if member not in wa:
        raise CiError(f"{wa.path.name} has the variant label {label} but no {member}")
    return parse_wheel_doc(wa.read(member, DOC_CAP), label, f"{wa.path.name}: {MEMBER}")


def add_variant(wheel: Path, out_dir: Path, doc: VariantDoc) -> Path:
    """A copy of a plain wheel as the variant `doc` describes: labelled file name, variant.json added
    (everything else copied as compressed bytes, RECORD regenerated)."""

    (label,) = doc.variants
    with WheelArchive.open(wheel) as wa:
        if wa.name.variant:
            raise CiError(f"{wheel.name} is already a variant wheel ({wa.name.variant})")
        member = f"{wa.dist_info}/{MEMBER}"
        data = dumps(doc)
        if member in wa:
            return rewrite(wa, out_dir, replace={member: data}, variant=label)
        return rewrite(wa, out_dir, add={member: data}, variant=label)
