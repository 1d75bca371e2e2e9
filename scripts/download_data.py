"""Put locomo10.json in place, sha256-checked.

    python -m scripts.download_data --out data/locomo10.json     (what `make data` runs)

Copies ../shared/locomo/locomo10.json when it exists (our machines), otherwise downloads
the file from the benchmark's public repository. The file is CC BY-NC 4.0: never commit it.
"""
from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import urllib.request
from pathlib import Path

SHA256 = "79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4"
URL = "https://raw.githubusercontent.com/snap-research/locomo/main/data/locomo10.json"
ROOT = Path(__file__).resolve().parents[1]
LOCAL_COPIES = [ROOT.parent / "shared" / "locomo" / "locomo10.json"]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "data" / "locomo10.json"))
    parser.add_argument("--source", help="a local copy to use instead of the defaults")
    args = parser.parse_args()
    out = Path(args.out)
    if out.is_file() and sha256(out) == SHA256:
        print(f"{out}: present, sha256 ok")
        return 0
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".part")
    sources = [Path(args.source)] if args.source else [p for p in LOCAL_COPIES if p.is_file()]
    if sources:
        shutil.copyfile(sources[0], tmp)
        origin = str(sources[0])
    else:
        print(f"downloading {URL}")
        try:
            with urllib.request.urlopen(URL, timeout=60) as r, open(tmp, "wb") as f:
                shutil.copyfileobj(r, f)
        except OSError as e:
            print(f"error: could not download {URL}: {e}; copy locomo10.json to {out} by hand", file=sys.stderr)
            return 2
        origin = URL
    digest = sha256(tmp)
    if digest != SHA256:
        tmp.unlink()
        print(f"error: {origin} has sha256 {digest}, expected {SHA256}", file=sys.stderr)
        return 2
    tmp.replace(out)
    print(f"{out}: copied from {origin}, sha256 ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
