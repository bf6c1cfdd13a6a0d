// The .npy writer (format 1.0): exact headers for the shapes numpy writes them for, 64-byte
// alignment, the data after the header, and the errors.
#include "suites/npy.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <vector>

#include "suites_test_util.h"

namespace seqbench {
namespace {

using testing::error_message;

std::string dict_of(const std::string& header) {
  const std::size_t len =
      static_cast<unsigned char>(header[8]) | (static_cast<unsigned char>(header[9]) << 8);
  EXPECT_EQ(header.size(), 10 + len);
  return header.substr(10);
}

TEST(Npy, HeaderAsNumpyWritesIt) {
  const std::vector<std::int64_t> shape = {2, 3};
  const std::string h = npy_header("<f4", shape);
  EXPECT_EQ(h.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_EQ(h.size() % 64, 0u);
  const std::string dict = dict_of(h);
  const std::string literal = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  EXPECT_EQ(dict.substr(0, literal.size()), literal);
  EXPECT_EQ(dict.back(), '\n');
  EXPECT_EQ(dict.find_first_not_of(' ', literal.size()), dict.size() - 1);  // spaces, then the newline
}

TEST(Npy, OneDimensionalAndScalarShapes) {
  const std::vector<std::int64_t> one = {5}, none = {}, three = {4, 0, 7};
  EXPECT_NE(dict_of(npy_header("<f2", one)).find("'shape': (5,), }"), std::string::npos);
  EXPECT_NE(dict_of(npy_header("<u2", none)).find("'shape': (), }"), std::string::npos);
  EXPECT_NE(dict_of(npy_header("<f4", three)).find("'shape': (4, 0, 7), }"), std::string::npos);
  for (const auto* s : {&one, &none, &three}) EXPECT_EQ(npy_header("<f4", *s).size() % 64, 0u);
}

TEST(Npy, DescrPerDtype) {
  EXPECT_EQ(npy_descr(DType::f32), "<f4");
  EXPECT_EQ(npy_descr(DType::f16), "<f2");
  EXPECT_EQ(npy_descr(DType::bf16), "<u2");
}

TEST(Npy, IntegerArrays) {
  const std::vector<std::int64_t> shape = {3};
  EXPECT_NE(
      dict_of(npy_header("|u1", shape)).find("{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }"),
      std::string::npos);
  EXPECT_NE(dict_of(npy_header("<i4", shape)).find("{'descr': '<i4',"), std::string::npos);
  const std::uint8_t bytes[3] = {1, 0, 1};
  EXPECT_EQ(error_message([&] { write_npy("m.npy", "|u1", shape, bytes, 2); }),
            "npy: 'm.npy': 2 bytes of data for shape and |u1 needing 3");
  EXPECT_EQ(error_message([&] { write_npy("t.npy", "<i4", shape, bytes, 3); }),
            "npy: 't.npy': 3 bytes of data for shape and <i4 needing 12");
}

TEST(Npy, WritesHeaderThenData) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("seqbench-npy-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::vector<float> data = {1.0f, -2.5f, 3.25f, 0.0f, 1e-3f, 7.0f};
  const std::vector<std::int64_t> shape = {3, 2};
  write_npy(dir / "a.npy", "<f4", shape, data.data(), data.size() * sizeof(float));
  std::ifstream in(dir / "a.npy", std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string header = npy_header("<f4", shape);
  ASSERT_EQ(file.size(), header.size() + sizeof(float) * data.size());
  EXPECT_EQ(file.substr(0, header.size()), header);
  std::vector<float> back(data.size());
  std::memcpy(back.data(), file.data() + header.size(), file.size() - header.size());
  EXPECT_EQ(back, data);
  std::filesystem::remove_all(dir);
}

TEST(Npy, Errors) {
  const std::vector<std::int64_t> shape = {2, 2}, negative = {-1};
  const float data[4] = {};
  EXPECT_EQ(error_message([&] { write_npy("x.npy", "<f4", shape, data, 12); }),
            "npy: 'x.npy': 12 bytes of data for shape and <f4 needing 16");
  EXPECT_EQ(error_message([&] { npy_header("<f8", shape); }),
            "npy: unsupported descr '<f8' (expected <f4, <f2, <u2, |u1 or <i4)");
  EXPECT_EQ(error_message([&] { npy_header("<f4", negative); }), "npy: dimension 0 is -1, not >= 0");
}

}  // namespace
}  // namespace seqbench
