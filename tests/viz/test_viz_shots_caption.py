"""outputs/viz_ch11_fused.png says what it draws (issue 49: its caption said Q K^T three times where the picture, made
with an upcast of 4, drew the output pass's dot product inside a loop over D's two groups: four times). The drawing
and its caption come from scripts/viz_shots.py's ch11_drawings, read here without a browser."""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import viz_shots  # noqa: E402


def test_the_fused_drawing_shows_as_many_dot_products_as_its_caption_says():
  svg = viz_shots.ch11_drawings()["viz_ch11_fused.png"]
  (said,) = re.findall(r"recomputes Q K\^T x(\d+)", svg)
  dot_products = [row for row in re.findall(r">([^<>]*)</text>", svg) if "*data1[" in row]   # q . k, one per loop
  assert len(dot_products) == int(said) == 3, (said, dot_products)
  assert "(loop)" not in svg   # no plain loop around a key loop, which would run its dot product more than once
  assert "viz_ch11_fused.png" in viz_shots.__doc__ and "recomputes Q K^T x3" in viz_shots.__doc__
