"""Kubernetes resource quantities ("500m", "128Gi", "8", "1.5e3") as numbers: the one parser the launcher
(doctor's capacity arithmetic) and the entrypoint (the smoke workload's /dev/shm check) share."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_SUFFIX = {"": 1, "m": Decimal("0.001"), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def parse(value) -> Decimal:
    """The quantity's value in base units (cores, bytes, devices); ValueError when it is not a quantity."""
    m = _QUANTITY.match(str(value).strip())
    if not m:
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    try:
        return Decimal(m.group(1)) * Decimal(_SUFFIX[m.group(2) or ""])
    except InvalidOperation:
        raise ValueError(f"not a Kubernetes quantity: {value!r}") from None
