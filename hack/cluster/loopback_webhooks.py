"""Rewrite an operator's own webhook manifests for an operator that runs on the host (sourced by up.sh's parts).

Each webhook's Service reference becomes `URL + path` with our loopback CA; configurations are renamed with a
prefix (so they never collide with an in-cluster install's). `--keep` keeps only webhooks whose path contains
one of the given strings; `--select SUBSTR=LABEL` gives the webhooks whose path contains SUBSTR an objectSelector
`LABEL Exists`, so objects that are not that operator's never wait on it (nor fail when it is down).

    python3 loopback_webhooks.py SRC CA_FILE URL PREFIX [--keep S ...] [--select S=LABEL ...]   (YAML on stdout)
"""

from __future__ import annotations

import argparse
import base64

import yaml


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("ca")
    ap.add_argument("url")
    ap.add_argument("prefix")
    ap.add_argument("--keep", action="append", default=[])
    ap.add_argument("--select", action="append", default=[])
    a = ap.parse_args()
    ca_b64 = base64.b64encode(open(a.ca, "rb").read()).decode()
    selects = [s.split("=", 1) for s in a.select]
    docs = [d for d in yaml.safe_load_all(open(a.src)) if d]
    for d in docs:
        d["metadata"]["name"] = a.prefix + d["metadata"]["name"]
        kept = []
        for w in d["webhooks"]:
            path = w["clientConfig"]["service"]["path"]
            if a.keep and not any(s in path for s in a.keep):
                continue
            w["clientConfig"] = {"url": a.url + path, "caBundle": ca_b64}
            for sub, label in selects:
                if sub in path:
                    w["objectSelector"] = {"matchExpressions": [{"key": label, "operator": "Exists"}]}
            kept.append(w)
        d["webhooks"] = kept
    print(yaml.safe_dump_all(docs, sort_keys=False))


if __name__ == "__main__":
    main()
