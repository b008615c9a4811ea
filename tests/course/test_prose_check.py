"""scripts/prose_check.py: a number with a unit in a notebook's prose must be printed by one of its outputs, or be
marked as the book's. It passes on every committed notebook and fails on a planted contradiction."""
import importlib.util
from pathlib import Path
import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("prose_check", ROOT / "scripts" / "prose_check.py")
prose_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(prose_check)


def notebook(markdown: str, output: str):
  nb = nbformat.v4.new_notebook()
  code = nbformat.v4.new_code_cell("print(t)")
  code.outputs = [nbformat.v4.new_output("stream", name="stdout", text=output)]
  nb.cells = [code, nbformat.v4.new_markdown_cell(markdown)]
  return nb


@pytest.mark.parametrize("path", prose_check.notebooks(), ids=lambda p: p.name)
def test_every_committed_notebook_passes(path):
  assert prose_check.unbacked(nbformat.read(path, as_version=4)) == []


def test_a_planted_contradiction_fails():
  found = prose_check.unbacked(notebook("The fused kernel took 12.5 ms here, twice the unfused.", "fused 3.4 ms\n"))
  assert [(k, number) for k, number, _ in found] == [(1, "12.5 ms")]


@pytest.mark.parametrize("markdown", [
  "The fused kernel took 3.4 ms here.",                              # printed above
  "The book measured 12.5 ms for it; here it is faster.",            # the book's number, marked as such
  "Time it with `best_of(fn, 12.5 ms)`.",                            # code
  "```\nfused 12.5 ms\n```",                                         # a quoted printout
  "## 12.5 ms headings are titles",                                  # a heading
  "A 4x4 tile, N = 1024, the 2 x 4 MB arrays: sizes are not results.",
])
def test_what_counts_as_backed(markdown):
  assert prose_check.unbacked(notebook(markdown, "fused 3.4 ms\nN = 1024, 4 MB\n")) == []


# Counts and comparisons (issue 28): each rule fails on a sentence that slipped through before it existed.
def claims(markdown: str, output: str, code: str = "print(t)") -> list[tuple[int, str]]:
  nb = notebook(markdown, output)
  nb.cells[0].source = code
  return [(k, claim) for k, claim, _, _ in prose_check.unbacked_claims(nb)]


def test_a_count_no_output_shows_fails():
  # chapter 12 cell 24 said four work-groups where the grid printed 64
  bad = "The default chooser keeps four work-groups in every launch here: the kernels are small."
  assert claims(bad, "e_128_128    grid (64, 1)   x block (128, 2)\n") == [(1, "four work-groups")]
  assert claims(bad, "r_128    grid (4,)   x block (8,)\n") == []


def test_a_spelled_factor_no_output_shows_fails():
  bad = "Q K^T is computed six times per row."
  assert claims(bad, "add[1024, 1024] x4\n") == [(1, "six times per")]
  assert claims(bad, "evaluations per element {'add[256, 256]': 6.0}\n") == []   # 6.0 prints the count
  assert claims("Apply it twelve times: the tree doubles.", "step 10\n") == []    # the code's count, not a factor


def test_best_of_k_must_be_what_the_code_times():
  # chapter 11b cell 11 said "best of five" over interleaved(fns, reps=3)
  bad = "Best of five after a warm-up, interleaved in one process."
  assert claims(bad, "N=1024: numpy 20.6 ms\n", code="t = interleaved(fns, reps=3)") == [(1, "Best of five")]
  assert claims(bad, "N=1024: numpy 20.6 ms\n", code="t = interleaved(fns, reps=5)") == []
  assert claims(bad, "N=1024: numpy 20.6 ms\n", code="t = best_of(lambda: f(x), 5)") == []


@pytest.mark.parametrize("bad, claim", [
  # chapter 11b cell 13: a pointer in one clause does not back a claim in the next
  ("Their times are of the same order (the ratio above says how close); both are far from the tiled kernels.",
   "far from"),
  # chapter 14 cell 20: 23.8 ms against 13.9 ms
  ("Building the graphs takes a time comparable to the kernels.", "comparable"),
])
def test_a_comparison_that_points_at_nothing_fails(bad, claim):
  assert claim in [c for _, c in claims(bad, "rewrite / flash = 1.74\n")]


@pytest.mark.parametrize("markdown", [
  "The rewrite is far from the flash kernel here: the ratio printed above says how far.",
  "How far the rewrite is from the flash kernel, as measured here:",                 # introduces the output below
  "The book measured times of the same order for both.",                             # the book's claim, cited
  "A GPU has far more arithmetic per byte than this CPU.",                           # not a comparison of results
  'The check reads the numbers behind a "far from" or "comparable".',                # words mentioned, in quotes
])
def test_what_counts_as_a_backed_comparison(markdown):
  assert claims(markdown, "rewrite / flash = 1.74\n") == []


def test_every_waiver_still_matches_a_claim():
  """A waiver whose sentence was reworded (or whose notebook was rewritten) must go."""
  paths = {p.name: p for p in prose_check.notebooks()}
  for name, waived in prose_check.WAIVED.items():
    if name not in paths: continue   # a student's tree lacks solutions/
    found = {claim for _, claim, _, _ in prose_check.unbacked_claims(nbformat.read(paths[name], as_version=4))}
    assert set(waived) <= found, f"{name}: waivers {sorted(set(waived) - found)} match nothing: remove them"


@pytest.mark.parametrize("path", prose_check.notebooks(), ids=lambda p: p.name)
def test_every_committed_notebook_backs_its_counts_and_comparisons(path):
  waived = prose_check.WAIVED.get(path.name, {})
  left = [(k, claim, why) for k, claim, _, why in prose_check.unbacked_claims(nbformat.read(path, as_version=4))
          if claim not in waived]
  assert left == []


# Growth per step and bounds on printed values (issue 43): each rule fails on the sentence that slipped through.
STEPS = ("step  1: as a tree      5 nodes, as a graph   4 nodes\n"
         "step  4: as a tree    161 nodes, as a graph  10 nodes\n"
         "step  7: as a tree   4373 nodes, as a graph  16 nodes\n"
         "step 10: as a tree 118097 nodes, as a graph  22 nodes\n")


def test_a_growth_per_step_the_printed_sizes_contradict_fails():
  # chapter 3 said the tree doubles at every step over these sizes (it triples: 3s + 2)
  bad = "Written out as a tree, the expression doubles in size at every step; as a graph it grows by two nodes."
  found = prose_check.growth_claims(notebook(bad, STEPS))
  assert [(k, claim) for k, claim, _, _ in found] == [(1, "doubles")]
  assert "x3.18/3.01/3.00" in found[0][3], found[0][3]
  assert prose_check.growth_claims(notebook(bad.replace("doubles", "triples"), STEPS)) == []
  assert [c for _, c, _, _ in prose_check.growth_claims(notebook(bad, "no table here\n"))] == ["doubles"]
  assert prose_check.growth_claims(notebook("Its FLOP count doubles without staging.", STEPS)) == []   # no "step"


INTENSITIES = ("                               FLOP/byte |   ms\n"
               "kernel                                   |   ms\n"
               "r_1024_1024     S = Q K^T          28.44 | 1.2\n"
               "r_1024          row max of S        0.50 | 0.4\n"
               "r_1024          row sum of exp      1.50 | 0.3\n"
               "e_1024_1024     P                   0.87 | 0.2\n")


def test_a_bound_the_printed_intensity_contradicts_fails():
  # chapter 10 said the softmax kernels sit below one FLOP per byte, over a row sum printed at 1.50
  bad = "The softmax kernels, the row max, the row sum of exponentials and `e_1024_1024` (P), sit below one FLOP " \
        "per byte."
  found = prose_check.bound_claims(notebook(bad, INTENSITIES))
  assert [(k, claim) for k, claim, _, _ in found] == [(1, "below one FLOP per byte")]
  assert "row sum of exp prints 1.5 FLOP/byte" in found[0][3], found[0][3]
  assert prose_check.bound_claims(notebook(bad.replace("below one", "below two"), INTENSITIES)) == []
  assert prose_check.bound_claims(notebook("S = Q K^T sits above 20 FLOP/byte.", INTENSITIES)) == []
  assert [c for _, c, _, _ in prose_check.bound_claims(notebook("S = Q K^T sits above 30 FLOP/byte.", INTENSITIES))] \
    == ["above 30 FLOP/byte"]


@pytest.mark.parametrize("path", prose_check.notebooks(), ids=lambda p: p.name)
def test_every_committed_notebook_grows_and_bounds_as_it_prints(path):
  nb = nbformat.read(path, as_version=4)
  assert prose_check.growth_claims(nb) == [] and prose_check.bound_claims(nb) == []
# Readings (issue 41): each rule fails on a sentence chapter 11 or appendix B stated while the rules above passed it.
def readings(markdown: str, output: str) -> list[tuple[int, str]]:
  return [(k, reading) for k, reading, _, _ in prose_check.unbacked_readings(notebook(markdown, output))]


DEBUG2 = "  r_1024_1024    3.277 ms    40.95 GFLOP/s\n...\n  r_1024_1024    2.497 ms    53.75 GFLOP/s\n"
DEBUG3 = "  r_2048_2048   20.560 ms   26.11 GFLOP/s   again   14.714 ms\n"


@pytest.mark.parametrize("markdown, output, reading", [
  # chapter 11.3: a time beside the printout it contradicts, in a paragraph that quotes the book elsewhere
  ("Six passes: by the book's count, 25 MB of traffic.\nAnd compare the first lines of the two runs: the GEMM "
   "writing S took 5.4 ms the first time and 2.0 ms the fifth.", DEBUG2, "5.4 ms"),
  ("The book's runtime allocated temporaries on every call. DEBUG=3 shows it directly: the S kernel took 9.7 ms on "
   "its first run and 1.1 ms when re-run (the again column above).", DEBUG3, "9.7 ms"),
])
def test_a_time_beside_the_printout_fails_even_where_the_paragraph_quotes_the_book(markdown, output, reading):
  assert prose_check.unbacked(notebook(markdown, output)) == []   # the number rule skips a quoting paragraph
  assert reading in [r for _, r in readings(markdown, output)]


@pytest.mark.parametrize("markdown, output, reading", [
  # chapter 11.3: the faults per call were printed as 839, 577, ...
  ("At N = 4096 the first version faults on every call, about a thousand faults.", "faults per call [839, 577, 577]\n",
   "about a thousand faults"),
  # appendix B: pytest collected 1,366
  ("uopc's own tests (about seven hundred of them) use all four.", "1366 tests collected\n",
   "about seven hundred of them"),
])
def test_an_approximate_count_no_output_shows_fails(markdown, output, reading):
  assert prose_check.unbacked_claims(notebook(markdown, output)) == []   # the count rule wants a noun after a number
  assert readings(markdown, output) == [(1, reading)]


@pytest.mark.parametrize("markdown, output, reading", [
  # chapter 11.3: the cached variant printed 0 faults per call
  ("The cached temporaries cost no page faults after the first call (the few that remain per call belong to the "
   "output array).", "minor page faults per call [0, 0, 0, 0, 0]\n", "the few that"),
  # chapter 11.8: the chart drew a peak of 30 GFLOP/s under curves at 44-55
  ("How far the online kernel is from the roofline: a few tens of GFLOP/s, against a peak of hundreds.",
   "one core's FMA peak, 30 GFLOP/s\n", "peak of hundreds"),
])
def test_a_vague_amount_that_points_at_nothing_fails(markdown, output, reading):
  assert reading in [r for _, r in readings(markdown, output)]


def test_a_fraction_of_another_number_no_output_shows_fails():
  # chapter 11.5: 203 times at N = 256 against the book's 240 at 512 is not "about half"
  bad = ("So we reproduce the timing at N = 256 (the book measured 2211 ms at 512; the ratio between them is about "
         "half of what it is at N = 512).")
  assert readings(bad, "without the RESHAPE simplify: 203 times slower\n") == [(1, "half of what")]


@pytest.mark.parametrize("markdown", [
  "Compare the first lines of the two runs: the GEMM writing S took 3.277 ms the first time.",   # printed
  "The book measured 9.7 ms on the first run and 1.1 ms when re-run here.",     # the sentence names its source
  "The book's run shows it. A first run pays the faults; the printout above says how many.",   # no number stated
  "The first version faults on every call, the number of faults printed above.",
  "The cached temporaries cost no faults (the few that remain, printed above, belong to the output).",
  "The online kernel reaches a fraction of the peak line: the chart reads it.",
  "Its rate is half of what the GEMM reaches (the ratio printed above).",
  "A kernel of about 150 lines, and a score above about 88 overflows.",        # not counts of this run's events
  "Expected: the three sizes (hundreds of MB for S), then two ok lines.",       # an Expected line reads the output
  "Several times faster than the naive loop, on any machine.",                  # a ratio that holds anywhere
])
def test_what_counts_as_a_backed_reading(markdown):
  assert readings(markdown, "3.277 ms\nfaults per call [839, 577]\nratio 0.37\n") == []


@pytest.mark.parametrize("path", prose_check.notebooks(), ids=lambda p: p.name)
def test_every_committed_notebook_backs_its_readings(path):
  assert prose_check.unbacked_readings(nbformat.read(path, as_version=4)) == []
