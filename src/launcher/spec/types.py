"""The spec's field types: Kubernetes quantities, names, labels and annotations, absolute paths, printable text,
environment variables, tracking addresses and Hydra overrides, each a constrained `str` pydantic checks (and the
chart's schema carries as the same pattern)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import StringConstraints

# Kubernetes quantities ("16", "500m", "128Gi", "1.5e3"): the apimachinery grammar, simplified to
# what a user writes. Anything else would be refused by the API server only at submit time.
QUANTITY_RE = r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$"
Quantity = Annotated[str, StringConstraints(pattern=QUANTITY_RE, max_length=32)]

# DNS-1123 label: lower-case alphanumerics and '-', starting and ending alphanumeric.
DNS1123_LABEL_RE = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS1123_SUBDOMAIN_RE = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DnsLabel = Annotated[str, StringConstraints(pattern=DNS1123_LABEL_RE, max_length=63)]
DnsSubdomain = Annotated[str, StringConstraints(pattern=DNS1123_SUBDOMAIN_RE, max_length=253)]

# Label keys/values and annotation keys as Kubernetes accepts them.
LABEL_VALUE_RE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
QUALIFIED_NAME_RE = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
LabelKey = Annotated[str, StringConstraints(pattern=QUALIFIED_NAME_RE, max_length=316)]
LabelValue = Annotated[str, StringConstraints(pattern=LABEL_VALUE_RE, max_length=63)]

# Characters no text field may hold: C0/C1 controls, DEL, line/paragraph separators and
# non-characters. YAML readers refuse or fold them, and the ConfigMap's JSON (written the way Go's
# encoding/json writes it, for Helm parity) leaves them unescaped. `\x{...}` is understood by both
# pydantic's Rust regex engine and Go's RE2 (Helm's schema validator).
CONTROL_CHARS = r"\x00-\x1f"
_UNPRINTABLE_REST = r"\x7f-\x9f\x{2028}\x{2029}\x{feff}\x{fffe}\x{ffff}"
# Absolute POSIX path (it ends up in a mountPath or a verl override).
AbsPath = Annotated[str, StringConstraints(pattern=rf"^/[^{CONTROL_CHARS}{_UNPRINTABLE_REST}]*$", max_length=1024)]
# Free text that ends up inside a pod (paths, hub ids): printable, bounded.
Text = Annotated[str, StringConstraints(pattern=rf"^[^{CONTROL_CHARS}{_UNPRINTABLE_REST}]+$", max_length=1024)]
# Annotation values may span lines (tab and newline are escaped in JSON), nothing else unprintable.
AnnotationValue = Annotated[
    str, StringConstraints(pattern=rf"^[^\x00-\x08\x0b-\x1f{_UNPRINTABLE_REST}]*$", max_length=4096)
]

GpuLabelScheme = Literal["gfd", "gke", "karpenter", "aks"]

EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=253)]
# A tracking server address: http(s), no user:password@ in it (credentials go in Secret references).
TrackingUri = Annotated[str, StringConstraints(pattern=r"^https?://[^\s/@]+(/[^\s]*)?$", max_length=1024)]
TrackingName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:/ -]+$", max_length=256)]

# An environment variable's value: printable text, bounded.
EnvValue = Annotated[str, StringConstraints(pattern=rf"^[^{CONTROL_CHARS}{_UNPRINTABLE_REST}]*$", max_length=4096)]

# One Hydra override as verl's main_ppo takes it on its command line: `key=value`, `+key=value` (a key verl's config
# lacks), `++key=value` (add or replace) or `~key[=value]` (delete); dotted keys, printable text, one argv item.
_HYDRA_KEY = r"[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*"
_HYDRA_VALUE = rf"[^{CONTROL_CHARS}{_UNPRINTABLE_REST}]*"
HydraOverride = Annotated[str, StringConstraints(
    pattern=rf"^(~{_HYDRA_KEY}(={_HYDRA_VALUE})?|(\+\+|\+)?{_HYDRA_KEY}={_HYDRA_VALUE})$", max_length=1024)]
