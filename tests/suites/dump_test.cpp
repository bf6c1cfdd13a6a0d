// `seqbench dump`'s host parts: the folder names, the integer arrays (keep masks, token ids) and
// their manifest entries, the unpacking of the kernels' bit-packed keep mask, and the folder
// writer with its errors. The GPU part (running a variant, copying its buffers) has no CPU test.
#include "suites/dump.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <vector>

#include "kernels/dropout_mask.h"
#include "suites/npy.h"
#include "suites_test_util.h"

namespace seqbench {
namespace {

using testing::error_message;

std::string read_all(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(Dump, FolderNames) {
  EXPECT_EQ(dump_folder_name("layernorm_fwd/bf16/tokens=4096,hidden=1024"),
            "layernorm_fwd_bf16_tokens_4096_hidden_1024");
  EXPECT_EQ(dump_folder_name("softmax_bwd/f32/bh=8x16,len=512,q=128"),
            "softmax_bwd_f32_bh_8x16_len_512_q_128");
  EXPECT_EQ(dump_folder_name("bias_act_dropout_fwd/bf16/gelu_tanh/rows=4096,cols=1024"),
            "bias_act_dropout_fwd_bf16_gelu_tanh_rows_4096_cols_1024");
  EXPECT_EQ(dump_folder_name("embedding_fwd/f32/tokens=4096,H=1024,vocab=32000,learned"),
            "embedding_fwd_f32_tokens_4096_H_1024_vocab_32000_learned");
  EXPECT_EQ(dump_folder_name("a b"), "a_b");
}

TEST(Dump, DtypeNamesAndDescrs) {
  DumpArray f{"x", "input", DType::bf16, {2}, {0, 0, 0, 0}, {}};
  EXPECT_EQ(dump_dtype_name(f), "bf16");
  EXPECT_EQ(dump_descr(f), "<u2");
  f.dtype = DType::f32;
  EXPECT_EQ(dump_descr(f), "<f4");
  const DumpArray keep = dump_host_array("keep", "input", std::vector<std::uint8_t>{1, 0, 1}, {3});
  EXPECT_EQ(dump_dtype_name(keep), "u8");
  EXPECT_EQ(dump_descr(keep), "|u1");
  EXPECT_EQ(keep.bytes, (std::vector<unsigned char>{1, 0, 1}));
  const DumpArray ids = dump_host_array("targets", "input", std::vector<std::int32_t>{-1, 258}, {2});
  EXPECT_EQ(dump_dtype_name(ids), "i32");
  EXPECT_EQ(dump_descr(ids), "<i4");
  EXPECT_EQ(ids.bytes, (std::vector<unsigned char>{0xff, 0xff, 0xff, 0xff, 0x02, 0x01, 0, 0}));
  DumpArray bad = keep;
  bad.int_type = "u16";
  EXPECT_EQ(error_message([&] { dump_descr(bad); }),
            "dump: array 'keep' has int_type 'u16' (expected u8 or i32)");
}

// The inverse of the kernels' packing (kernels/dropout_mask.h pack_dropout_mask), for every tail.
TEST(Dump, UnpacksTheKernelsKeepMask) {
  for (const std::size_t n : {0u, 1u, 7u, 8u, 9u, 31u, 32u, 33u, 1000u}) {
    std::vector<std::uint8_t> keep(n);
    std::uint64_t state = 12345 + n;
    for (auto& k : keep) k = static_cast<std::uint8_t>((state = state * 6364136223846793005ull + 1) >> 63);
    const std::vector<std::uint8_t> packed = kernels::dropout_detail::pack_dropout_mask(keep.data(), n);
    EXPECT_EQ(unpack_keep_mask(packed, n), keep) << "n=" << n;
  }
  const std::vector<std::uint8_t> bits = {0b10100101};
  EXPECT_EQ(unpack_keep_mask(bits, 8), (std::vector<std::uint8_t>{1, 0, 1, 0, 0, 1, 0, 1}));
  EXPECT_EQ(error_message([&] { unpack_keep_mask(bits, 9); }),
            "unpack_keep_mask: 1 bytes hold fewer than 9 bits");
}

class DumpFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("seqbench-dump-test-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(DumpFolder, WritesArraysThenTheManifest) {
  const std::vector<float> x = {1.0f, -2.0f, 0.5f, 4.0f};
  DumpArray xa{"x", "input", DType::f32, {2, 2}, {}, {}};
  xa.bytes.resize(sizeof(float) * x.size());
  std::memcpy(xa.bytes.data(), x.data(), xa.bytes.size());
  const std::vector<DumpArray> arrays = {
      xa, dump_host_array("keep", "input", std::vector<std::uint8_t>{1, 0, 0, 1}, {2, 2}),
      dump_host_array("tokens", "input", std::vector<std::int32_t>{3, 1}, {2}),
      DumpArray{"y", "output", DType::f16, {1}, {0, 0x3c}, {}}};
  const nlohmann::json params = {{"rows", 2}, {"p", 0.1}};
  const auto folder = dir_ / "operators" / dump_folder_name("dropout_fwd/f32/elements=4");
  EXPECT_EQ(
      write_dump_folder(folder, "operators", "dropout_fwd/f32/elements=4", params, "fused_bitmask", arrays),
      4u);
  const nlohmann::json m = nlohmann::json::parse(read_all(folder / "manifest.json"));
  EXPECT_EQ(m["schema"], "seqbench.dump/1");
  EXPECT_EQ(m["suite"], "operators");
  EXPECT_EQ(m["experiment"], "dropout_fwd/f32/elements=4");
  EXPECT_EQ(m["variant"], "fused_bitmask");
  EXPECT_EQ(m["params"], params);
  ASSERT_EQ(m["arrays"].size(), 4u);
  const std::vector<std::string> dtypes = {"f32", "u8", "i32", "f16"}, descrs = {"<f4", "|u1", "<i4", "<f2"};
  for (std::size_t i = 0; i < 4; ++i) {
    const auto& a = m["arrays"][i];
    EXPECT_EQ(a["name"], arrays[i].name);
    EXPECT_EQ(a["role"], arrays[i].role);
    EXPECT_EQ(a["dtype"], dtypes[i]);
    EXPECT_EQ(a["descr"], descrs[i]);
    EXPECT_EQ(a["shape"].get<std::vector<std::int64_t>>(), arrays[i].shape);
    const std::string file = read_all(folder / a["file"].get<std::string>());
    const std::string header = npy_header(descrs[i], arrays[i].shape);
    ASSERT_EQ(file.size(), header.size() + arrays[i].bytes.size());
    EXPECT_EQ(file.substr(0, header.size()), header);
    EXPECT_EQ(std::memcmp(file.data() + header.size(), arrays[i].bytes.data(), arrays[i].bytes.size()), 0);
  }
}

TEST_F(DumpFolder, Errors) {
  const DumpArray a = dump_host_array("keep", "input", std::vector<std::uint8_t>{1, 0}, {2});
  EXPECT_EQ(error_message([&] {
              write_dump_folder(dir_, "s", "e", {}, "fused", {a, a});
            }),
            "dump: experiment e names array 'keep' twice");
  DumpArray scratch = a;
  scratch.role = "scratch";
  EXPECT_EQ(error_message([&] { write_dump_folder(dir_, "s", "e", {}, "fused", {scratch}); }),
            "dump: array 'keep' has role 'scratch' (expected input or output)");
  DumpArray short_ids = dump_host_array("ids", "input", std::vector<std::int32_t>{1, 2}, {3});
  EXPECT_NE(error_message([&] {
              write_dump_folder(dir_, "s", "e", {}, "fused", {short_ids});
            }).find("8 bytes of data for shape and <i4 needing 12"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "manifest.json"));  // no manifest: not a complete folder
  // A failing re-dump removes the earlier manifest first.
  EXPECT_EQ(write_dump_folder(dir_, "s", "e", {}, "fused", {a}), 1u);
  EXPECT_TRUE(std::filesystem::exists(dir_ / "manifest.json"));
  EXPECT_THROW(write_dump_folder(dir_, "s", "e", {}, "fused", {a, short_ids}), Error);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "manifest.json"));
}

}  // namespace
}  // namespace seqbench
