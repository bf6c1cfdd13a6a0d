"""The embedding family's token ids follow params.token_distribution as suites/operators/embedding.cu
draws them (D4): "uniform", or "zipf(s)" with zipf_tokens' weights (r + 1)^-s over the vocab - 1
non-padding ids; the C++ constants are read from the source, so the two cannot drift apart."""
import os
import re
import unittest

from tests import support
from seqbench_torch import listing
from seqbench_torch.errors import Unmapped
from seqbench_torch.families import embedding, plan_for

EMBEDDING_CU = os.path.join(support.SOURCE_DIR, "suites", "operators", "embedding.cu")


class Distribution(unittest.TestCase):
    def test_parses_what_seqbench_writes(self):
        self.assertIsNone(embedding.token_distribution({"token_distribution": "uniform"}))
        self.assertIsNone(embedding.token_distribution({}))  # lists from before the key: uniform, as then
        self.assertEqual(embedding.token_distribution({"token_distribution": "zipf(1.1)"}), 1.1)
        self.assertEqual(embedding.token_distribution({"token_distribution": "zipf(2)"}), 2.0)

    def test_anything_else_is_unmapped_with_the_reason(self):
        for bad in ("zipf", "zipf(0)", "zipf(-1)", "normal", "zipf(1.1) "):
            with self.assertRaisesRegex(Unmapped, "params.token_distribution .* is not 'uniform' or 'zipf"):
                embedding.token_distribution({"token_distribution": bad})


class AsTheCppSide(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(EMBEDDING_CU, encoding="utf-8") as f:
            cls.source = f.read()

    def test_the_weights_are_zipf_tokens(self):
        # zipf_tokens: total += std::pow(static_cast<double>(r + 1), -exponent) for each rank r of the
        # ids other than the padding id; tokens: padding with probability pad_share, else a rank's id.
        self.assertIn("total += std::pow(static_cast<double>(r + 1), -exponent);", self.source)
        self.assertRegex(self.source, r"if \(id != padding_idx\) ids\.push_back")
        self.assertIn("t = pad ? padding_idx : ids[std::min(r, ids.size() - 1)];", self.source)
        self.assertEqual(embedding.zipf_rank_weights(4, 1.1), [1.0, 2.0 ** -1.1, 3.0 ** -1.1, 4.0 ** -1.1])

    def test_the_constants(self):
        self.assertIn("constexpr double kZipfExponent = 1.1;", self.source)
        self.assertIn(f"config.padding_idx = {embedding.PADDING_IDX};", self.source)
        self.assertIn('{"token_distribution", zipf ? "zipf(1.1)" : "uniform"}', self.source)
        # random_tokens: uniform over [0, vocab), the padding id included.
        self.assertIn("t = pad ? padding_idx : static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(vocab));",
                      self.source)


class FakeTensor:
    def __init__(self, values):
        self.values = list(values)

    def __getitem__(self, index):
        return FakeTensor(self.values[i] for i in index.values)

    def __setitem__(self, mask, value):
        self.values = [value if m else v for v, m in zip(self.values, mask.values)]

    def __lt__(self, x):
        return FakeTensor(v < x for v in self.values)

    def view(self, *shape):
        self.shape = shape
        return self


class FakeTorch:
    int64, float64 = "int64", "float64"

    def __init__(self, ranks):
        self.ranks = ranks
        self.calls = []

    def tensor(self, values, dtype=None, device=None):
        self.calls.append(("tensor", dtype, device))
        return FakeTensor(values)

    def randperm(self, n, device=None):
        return FakeTensor(reversed(range(n)))

    def multinomial(self, weights, count, replacement=False):
        self.calls.append(("multinomial", weights.values, count, replacement))
        return FakeTensor(self.ranks)

    def randint(self, low, high, shape, device=None):
        self.calls.append(("randint", low, high, shape))
        return FakeTensor([0, 1, 2, 3, 4, 1])

    def rand(self, *shape, device=None):
        return FakeTensor([0.5, 0.5, 0.05, 0.5, 0.5, 0.5])  # the third token becomes padding


class ZipfIds(unittest.TestCase):
    def test_ranks_drawn_by_the_weights_stand_for_the_shuffled_non_padding_ids(self):
        torch = FakeTorch([0, 1, 2, 3, 0, 0])
        ids = embedding.zipf_token_ids(torch, 6, 5, 1.1)
        # Non-padding ids 0, 2, 3, 4; the stand-in permutation reverses them: ranks 0..3 are 4, 3, 2, 0.
        self.assertEqual(ids.values, [4, 3, 2, 0, 4, 4])
        multinomial = [c for c in torch.calls if c[0] == "multinomial"]
        self.assertEqual(multinomial, [("multinomial", embedding.zipf_rank_weights(4, 1.1), 6, True)])
        self.assertIn(("tensor", "float64", "cuda"), torch.calls)  # on the GPU, in double as the C++ cdf


class DrawTokens(unittest.TestCase):
    def test_uniform_over_the_whole_vocabulary_then_padding_by_share(self):
        torch = FakeTorch([])
        ids = embedding.draw_tokens(torch, 2, 3, 5, 0.1, None)
        self.assertEqual(torch.calls, [("randint", 0, 5, (2, 3))])
        # A drawn padding id stays padding, as in random_tokens; the share's draw pads the third.
        self.assertEqual(ids.values, [0, 1, 1, 3, 4, 1])

    def test_zipf_then_padding_by_share(self):
        torch = FakeTorch([0, 1, 2, 3, 0, 0])
        ids = embedding.draw_tokens(torch, 2, 3, 5, 0.1, 1.1)
        self.assertEqual(ids.values, [4, 3, 1, 0, 4, 4])
        self.assertEqual(ids.shape, (2, 3))


class RealList(unittest.TestCase):
    def test_the_zipf_experiments_map_with_their_exponent(self):
        zipf = 0
        for quick in (False, True):
            for s in listing.list_suites(support.seqbench_binary(), quick):
                for e in s.experiments:
                    if s.name != "operators" or not e.family.startswith("embedding"):
                        continue
                    expected = 1.1 if re.search(r",zipf$", e.name) else None
                    self.assertEqual(embedding.token_distribution(e.params), expected, e.name)
                    plan_for(e)
                    zipf += expected is not None
        self.assertGreater(zipf, 0)


if __name__ == "__main__":
    unittest.main()
