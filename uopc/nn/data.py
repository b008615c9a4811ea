"""Text for chapter 14: the committed Shakespeare extract (data/shakespeare.txt), a character-level tokenizer, a
train/validation split and random batches.

  text = load_text()                                  # 1 MB, 76 characters; checked against its sha256
  tok = CharTokenizer(text)                           # id = index in the sorted alphabet
  train, val = split(tok.encode(text), 0.9)           # the first 90% trains, the last 10% validates
  x, y = get_batch(train, batch=16, block=32, rng=np.random.default_rng(0))   # (16, 32) int32 each; y is x shifted
"""
from __future__ import annotations
import hashlib, pathlib
import numpy as np
from uopc.errors import UsageError

DATA = pathlib.Path(__file__).resolve().parents[2] / "data" / "shakespeare.txt"


def load_text(path=DATA, verify: bool = True) -> str:
  """The extract written by scripts/prepare_text.py; verify: its sha256 must match the committed checksum."""
  path = pathlib.Path(path)
  raw = path.read_bytes()
  checksum = path.with_suffix(".txt.sha256")
  if verify and checksum.exists():
    want, got = checksum.read_text().split()[0], hashlib.sha256(raw).hexdigest()
    if want != got: raise UsageError(f"{path}: sha256 {got} does not match {checksum.name} ({want})")
  return raw.decode("utf-8")


class CharTokenizer:
  """One token per distinct character, numbered in sorted order."""
  def __init__(self, text: str):
    self.chars = sorted(set(text))
    self.stoi = {c: k for k, c in enumerate(self.chars)}

  @property
  def vocab_size(self) -> int: return len(self.chars)

  def encode(self, s: str) -> np.ndarray:
    unknown = sorted(set(s) - set(self.stoi))
    if unknown: raise UsageError(f"encode: characters {unknown!r} are not in the tokenizer's alphabet")
    return np.array([self.stoi[c] for c in s], np.int32)

  def decode(self, ids) -> str:
    ids = [int(k) for k in ids]
    bad = sorted({k for k in ids if not 0 <= k < len(self.chars)})
    if bad: raise UsageError(f"decode: ids {bad[:5]} are outside the alphabet of {len(self.chars)} characters (a model "
                             "trained with another vocabulary?)")
    return "".join(self.chars[k] for k in ids)


def split(ids: np.ndarray, train_fraction: float = 0.9) -> tuple[np.ndarray, np.ndarray]:
  """The first train_fraction of the tokens and the rest (a contiguous split: no validation text leaks in)."""
  n = int(len(ids) * train_fraction)
  return ids[:n], ids[n:]


def get_batch(ids: np.ndarray, batch: int, block: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
  """batch windows of block tokens at random offsets: inputs x and next-token targets y, (batch, block) int32."""
  at = rng.integers(0, len(ids) - block - 1, batch)
  x = np.stack([ids[a:a + block] for a in at])
  y = np.stack([ids[a + 1:a + block + 1] for a in at])
  return x.astype(np.int32), y.astype(np.int32)
