// The training-data readers on small crafted files (valid ones, and each kind
// of malformed, hostile or non-regular one), and BatchSource's Seek and the
// Prefetcher against plain Next calls.

#include "runtime/train/dataset.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <limits>
#include <string>
#include <thread>
#include <vector>

namespace graphc::runtime {
namespace {

// ---------------------------------------------------------------------------
// File builders.

std::string LittleEndian32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

std::string BigEndian32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>(v >> (24 - 8 * i));
  return s;
}

template <typename T>
std::string Bytes(const std::vector<T>& values) {
  std::string s(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(s.data(), values.data(), s.size());
  return s;
}

// The header's dict as numpy writes it.
std::string NpyDict(const std::string& descr, const std::string& shape,
                    const std::string& fortran = "False") {
  return "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
}

// A .npy file: magic, version, header length, the dict padded to 64 bytes
// with spaces and a newline (as numpy does), data.
std::string Npy(const std::string& dict, const std::string& data, int version = 1) {
  const size_t prefix = version == 1 ? 10 : 12;
  std::string header = dict;
  header += std::string((64 - (prefix + header.size() + 1) % 64) % 64, ' ') + "\n";
  std::string out = std::string("\x93NUMPY", 6) + static_cast<char>(version) + '\0';
  if (version == 1) {
    out += LittleEndian32(static_cast<uint32_t>(header.size())).substr(0, 2);
  } else {
    out += LittleEndian32(static_cast<uint32_t>(header.size()));
  }
  return out + header + data;
}

// An IDX file of ubyte images (rank 3) or labels (rank 1).
std::string IdxImages(uint32_t count, uint32_t height, uint32_t width, const std::string& pixels) {
  return BigEndian32(0x803) + BigEndian32(count) + BigEndian32(height) + BigEndian32(width) +
         pixels;
}

std::string IdxLabels(uint32_t count, const std::string& labels) {
  return BigEndian32(0x801) + BigEndian32(count) + labels;
}

// An error of `code` whose message starts with `path` and contains `fragment`.
template <typename T>
::testing::AssertionResult IsError(const StatusOr<T>& result, ErrorCode code,
                                   const std::string& path, const std::string& fragment) {
  if (result.ok()) return ::testing::AssertionFailure() << "accepted; wanted " << fragment;
  const Status& status = result.status();
  if (status.code() != code)
    return ::testing::AssertionFailure() << "wrong code: " << status.ToString();
  if (status.message().rfind(path + ": ", 0) != 0)
    return ::testing::AssertionFailure() << "does not name " << path << ": " << status.ToString();
  if (status.message().find(fragment) == std::string::npos)
    return ::testing::AssertionFailure() << "no '" << fragment << "' in " << status.ToString();
  return ::testing::AssertionSuccess();
}

// Runs `read` on a thread and fails (then unblocks it by opening `fifo` for
// writing) if it has not returned within a second: a reader must never wait
// on a FIFO.
template <typename T>
StatusOr<T> WithoutBlocking(const std::function<StatusOr<T>()>& read, const std::string& fifo) {
  std::future<StatusOr<T>> result = std::async(std::launch::async, read);
  if (result.wait_for(std::chrono::seconds(1)) == std::future_status::timeout) {
    ADD_FAILURE() << "the reader blocked on the FIFO " << fifo;
    int fd = open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) close(fd);
  }
  return result.get();
}

class DatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/graphc-dataset-test-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr) << std::strerror(errno);
    dir_ = dir;
  }
  void TearDown() override {
    std::error_code error;
    std::filesystem::remove_all(dir_, error);
  }

  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  std::string WriteGzip(const std::string& name, const std::string& bytes) {
    const std::string path = dir_ + "/" + name;
    gzFile file = gzopen(path.c_str(), "wb");
    EXPECT_NE(file, nullptr);
    if (file == nullptr) return path;
    EXPECT_EQ(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
    EXPECT_EQ(gzclose(file), Z_OK);
    return path;
  }

  std::string ReadBack(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  std::string MakeFifo(const std::string& name) {
    const std::string path = dir_ + "/" + name;
    EXPECT_EQ(mkfifo(path.c_str(), 0600), 0) << std::strerror(errno);
    return path;
  }

  std::string dir_;
};

// ---------------------------------------------------------------------------
// .npy

class DatasetNpyTest : public DatasetTest {
 protected:
  // Two float32 1x2x3 images and two int32 labels.
  std::string ValidImages() {
    std::vector<float> pixels(12);
    for (int i = 0; i < 12; ++i) pixels[i] = 0.5f * i - 1;
    return Write("images.npy", Npy(NpyDict("<f4", "(2, 1, 2, 3)"), Bytes(pixels)));
  }
  std::string ValidLabels() {
    return Write("labels.npy", Npy(NpyDict("<i4", "(2,)"), Bytes(std::vector<int32_t>{3, 1})));
  }
};

TEST_F(DatasetNpyTest, Float32ImagesWithInt32Labels) {
  StatusOr<Examples> e = ReadNpy(ValidImages(), ValidLabels());
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->count, 2);
  EXPECT_EQ(e->channels, 1);
  EXPECT_EQ(e->height, 2);
  EXPECT_EQ(e->width, 3);
  ASSERT_EQ(e->images.size(), 12u);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(e->images[i], 0.5f * i - 1);
  EXPECT_EQ(e->labels, (std::vector<int32_t>{3, 1}));
}

// graphrun infer's arrays: what NpyFloat32File writes reads back, for a
// scalar, a vector and a matrix; numpy's header rules (64-byte alignment).
TEST_F(DatasetNpyTest, Float32ArraysRoundTrip) {
  const std::vector<float> values = {1.5f, -2.0f, 0.25f, 7.0f, -0.0f, 3.0f};
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{}, std::vector<int64_t>{6}, std::vector<int64_t>{2, 3}}) {
    const uint64_t count = shape.empty() ? 1 : 6;
    const std::string bytes = NpyFloat32File(shape, values.data(), count);
    EXPECT_EQ((bytes.size() - count * 4) % 64, 0u) << shape.size();
    StatusOr<NpyArray> a = ReadNpyFloat32(Write("a.npy", bytes));
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_EQ(a->shape, shape);
    EXPECT_EQ(a->values, std::vector<float>(values.begin(), values.begin() + count));
  }
  // Another dtype, or a size the shape does not say, is refused naming the file.
  StatusOr<NpyArray> wrong =
      ReadNpyFloat32(Write("f8.npy", Npy(NpyDict("<f8", "(2,)"), std::string(16, '\0'))));
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("f8.npy: an array of dtype '<f8'"), std::string::npos)
      << wrong.status().ToString();
  StatusOr<NpyArray> short_data =
      ReadNpyFloat32(Write("short.npy", Npy(NpyDict("<f4", "(3,)"), std::string(8, '\0'))));
  EXPECT_FALSE(short_data.ok());
}

TEST_F(DatasetNpyTest, Uint8ImagesWithInt64LabelsAndLaterVersions) {
  const std::vector<uint8_t> pixels = {0, 255, 51, 102, 7, 8, 9, 10, 11, 12, 13, 200};
  const std::string images = Write("u8.npy", Npy(NpyDict("|u1", "(3, 2, 2)"), Bytes(pixels), 2));
  const std::string labels = Write(
      "i64.npy", Npy(NpyDict("<i8", "(3,)"), Bytes(std::vector<int64_t>{0, 9, INT32_MAX}), 3));
  StatusOr<Examples> e = ReadNpy(images, labels);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->count, 3);
  EXPECT_EQ(e->channels, 1);
  EXPECT_EQ(e->height, 2);
  EXPECT_EQ(e->width, 2);
  ASSERT_EQ(e->images.size(), 12u);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(e->images[i], pixels[i] / 255.0f);
  EXPECT_EQ(e->labels, (std::vector<int32_t>{0, 9, INT32_MAX}));
}

TEST_F(DatasetNpyTest, MalformedImagesAreRefusedNamingTheFile) {
  const std::string floats48(48, '\0');
  struct Case {
    const char* name;
    std::string bytes;
    const char* problem;
  };
  const Case cases[] = {
      // Shapes whose byte size wraps around 2^64 (before: accepted as 0 bytes).
      {"product_overflow", Npy(NpyDict("<f4", "(4294967296, 4294967296, 1, 1)"), ""),
       "is too large (more than 2^64 bytes)"},
      {"bytes_overflow", Npy(NpyDict("<f4", "(4611686018427387904, 1, 1, 1)"), ""),
       "is too large"},
      {"dim_past_int64", Npy(NpyDict("<f4", "(99999999999999999999, 1, 2, 3)"), floats48),
       "unreadable shape (99999999999999999999, 1, 2, 3)"},
      {"negative_dim", Npy(NpyDict("<f4", "(-2, 1, 2, 3)"), floats48), "unreadable shape"},
      {"garbage_dim", Npy(NpyDict("<f4", "(2, x, 2, 3)"), floats48), "unreadable shape"},
      {"signed_dim", Npy(NpyDict("<f4", "(+2, 1, 2, 3)"), floats48), "unreadable shape"},
      {"empty_dim", Npy(NpyDict("<f4", "(2, , 2, 3)"), floats48), "unreadable shape"},
      {"only_comma", Npy(NpyDict("<f4", "(,)"), floats48), "unreadable shape"},
      {"zero_dim", Npy(NpyDict("<f4", "(0, 1, 2, 3)"), ""), "an empty array of shape (0, 1, 2, 3)"},
      {"unterminated_shape", Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1, }", ""),
       "unreadable .npy header"},
      {"no_shape", Npy("{'descr': '<f4', 'fortran_order': False, }", floats48),
       "the .npy header has no descr, fortran_order or shape"},
      {"repeated_key",
       Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1, 2, 3), 'shape': (1,), }",
           floats48),
       "unreadable .npy header"},
      {"junk_after_dict", Npy(NpyDict("<f4", "(2, 1, 2, 3)") + " junk", floats48),
       "unreadable .npy header"},
      {"not_a_dict", Npy("['descr', '<f4']", floats48), "unreadable .npy header"},
      {"fortran", Npy(NpyDict("<f4", "(2, 1, 2, 3)", "True"), floats48),
       "a Fortran-order array; save it with np.ascontiguousarray"},
      {"fortran_garbage", Npy(NpyDict("<f4", "(2, 1, 2, 3)", "1"), floats48),
       "unreadable fortran_order 1"},
      {"big_endian", Npy(NpyDict(">f4", "(2, 1, 2, 3)"), floats48),
       "images of dtype '>f4'; give float32 ('<f4') or uint8 ('|u1')"},
      {"float64", Npy(NpyDict("<f8", "(2, 1, 2, 3)"), floats48 + floats48),
       "images of dtype '<f8'"},
      {"short_data", Npy(NpyDict("<f4", "(2, 1, 2, 3)"), floats48.substr(4)),
       "holds 44 bytes of data, its shape (2, 1, 2, 3) needs 48"},
      {"long_data", Npy(NpyDict("<f4", "(2, 1, 2, 3)"), floats48 + "0000"),
       "holds 52 bytes of data, its shape (2, 1, 2, 3) needs 48"},
      {"rank_2", Npy(NpyDict("<f4", "(2, 6)"), floats48), "images of shape (2, 6)"},
      {"header_past_end", std::string("\x93NUMPY\x01\x00\xff\xff{}", 12), "truncated .npy header"},
      {"huge_header", std::string("\x93NUMPY\x02\x00\xff\xff\xff\xff{}", 14),
       "a .npy header of 4294967295 bytes; at most 1048576 are accepted"},
      {"header_over_1mib", std::string("\x93NUMPY\x02\x00\x01\x00\x10\x00", 12) +
                               std::string(0x100001, ' '),
       "a .npy header of 1048577 bytes"},
      {"version_4", std::string("\x93NUMPY\x04\x00\x10\x00", 10) + std::string(16, ' '),
       ".npy format version 4 is not supported"},
      {"version_2_short", std::string("\x93NUMPY\x02\x00\x10\x00", 10), "truncated .npy header"},
      {"shorter_than_a_prefix", std::string("\x93NUMPY\x01", 7), "not a NumPy .npy file"},
      {"zip", "PK\x03\x04 this is a zip file", "not a NumPy .npy file"},
      {"empty_file", "", "not a NumPy .npy file"},
  };
  const std::string labels = ValidLabels();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = Write(std::string(c.name) + ".npy", c.bytes);
    EXPECT_TRUE(IsError(ReadNpy(path, labels), ErrorCode::kIo, path, c.problem));
  }
}

TEST_F(DatasetNpyTest, MalformedLabelsAreRefusedNamingTheFileAndExample) {
  struct Case {
    const char* name;
    std::string bytes;
    const char* problem;
  };
  const Case cases[] = {
      {"float_labels", Npy(NpyDict("<f4", "(2,)"), std::string(8, '\0')),
       "labels of dtype '<f4'; give int32 ('<i4') or int64 ('<i8')"},
      {"too_many", Npy(NpyDict("<i4", "(3,)"), Bytes(std::vector<int32_t>{0, 1, 2})),
       "labels of shape (3) for 2 images; give (2,)"},
      {"rank_2", Npy(NpyDict("<i4", "(2, 1)"), Bytes(std::vector<int32_t>{0, 1})),
       "labels of shape (2, 1)"},
      {"short", Npy(NpyDict("<i8", "(2,)"), Bytes(std::vector<int64_t>{0})),
       "holds 8 bytes of data, its shape (2) needs 16"},
      {"past_int32", Npy(NpyDict("<i8", "(2,)"), Bytes(std::vector<int64_t>{1, int64_t{1} << 40})),
       "label 1099511627776 of example 1 is out of range"},
      {"below_int32", Npy(NpyDict("<i8", "(2,)"), Bytes(std::vector<int64_t>{INT64_MIN, 0})),
       "label -9223372036854775808 of example 0 is out of range"},
      {"negative", Npy(NpyDict("<i4", "(2,)"), Bytes(std::vector<int32_t>{0, -1})),
       "label -1 of example 1 is out of range"},
  };
  const std::string images = ValidImages();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = Write(std::string(c.name) + ".npy", c.bytes);
    EXPECT_TRUE(IsError(ReadNpy(images, path), ErrorCode::kIo, path, c.problem));
  }
}

TEST_F(DatasetNpyTest, NonFinitePixelsAreRefused) {
  std::vector<float> pixels(12, 0.25f);
  pixels[4] = std::numeric_limits<float>::quiet_NaN();
  const std::string nan = Write("nan.npy", Npy(NpyDict("<f4", "(2, 1, 2, 3)"), Bytes(pixels)));
  EXPECT_TRUE(IsError(ReadNpy(nan, ValidLabels()), ErrorCode::kNonFinite, nan, "element 4 is NaN"));
  pixels[4] = 0;
  pixels[11] = -std::numeric_limits<float>::infinity();
  const std::string inf = Write("inf.npy", Npy(NpyDict("<f4", "(2, 1, 2, 3)"), Bytes(pixels)));
  EXPECT_TRUE(
      IsError(ReadNpy(inf, ValidLabels()), ErrorCode::kNonFinite, inf, "element 11 is infinite"));
}

TEST_F(DatasetNpyTest, NonRegularFilesAreRefusedWithoutBlocking) {
  const std::string images = ValidImages(), labels = ValidLabels();
  // A directory as a .npy path used to throw from std::vector and abort graphrun.
  EXPECT_TRUE(IsError(ReadNpy(dir_, labels), ErrorCode::kIo, dir_, "is a directory"));
  EXPECT_TRUE(IsError(ReadNpy(images, dir_), ErrorCode::kIo, dir_, "is a directory"));
  EXPECT_TRUE(IsError(ReadNpy("/dev/zero", labels), ErrorCode::kIo, "/dev/zero",
                      "is not a regular file (it is a character device)"));
  const std::string fifo = MakeFifo("fifo.npy");
  StatusOr<Examples> e =
      WithoutBlocking<Examples>([&] { return ReadNpy(fifo, labels); }, fifo);
  EXPECT_TRUE(IsError(e, ErrorCode::kIo, fifo, "is not a regular file (it is a FIFO)"));
  e = WithoutBlocking<Examples>([&] { return ReadNpy(images, fifo); }, fifo);
  EXPECT_TRUE(IsError(e, ErrorCode::kIo, fifo, "is not a regular file (it is a FIFO)"));
  const std::string missing = dir_ + "/nowhere.npy";
  EXPECT_TRUE(IsError(ReadNpy(missing, labels), ErrorCode::kIo, missing,
                      "cannot open (No such file or directory)"));
}

// ---------------------------------------------------------------------------
// IDX

class DatasetIdxTest : public DatasetTest {
 protected:
  // Three 2x2 images and their labels.
  const std::string pixels_ = std::string("\x00\x10\x20\x30\x40\x50\x60\x70\x80\x90\xa0\xff", 12);
  const std::string images_ = IdxImages(3, 2, 2, pixels_);
  const std::string labels_ = IdxLabels(3, std::string("\x02\x00\x09", 3));

  void ExpectValid(const StatusOr<Examples>& result, float mean, float stddev) {
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    const Examples& e = result.value();
    EXPECT_EQ(e.count, 3);
    EXPECT_EQ(e.channels, 1);
    EXPECT_EQ(e.height, 2);
    EXPECT_EQ(e.width, 2);
    ASSERT_EQ(e.images.size(), 12u);
    for (int i = 0; i < 12; ++i)
      EXPECT_EQ(e.images[i], (static_cast<uint8_t>(pixels_[i]) / 255.0f - mean) / stddev);
    EXPECT_EQ(e.labels, (std::vector<int32_t>{2, 0, 9}));
  }
};

TEST_F(DatasetIdxTest, PlainAndGzipFilesLoad) {
  ExpectValid(ReadIdx(Write("i", images_), Write("l", labels_), 0.5f, 0.25f), 0.5f, 0.25f);
  ExpectValid(ReadIdx(WriteGzip("i.gz", images_), WriteGzip("l.gz", labels_), 0.25f, 2.0f), 0.25f,
              2.0f);
}

TEST_F(DatasetIdxTest, FashionMnistPicksGzipOrPlainFiles) {
  WriteGzip("train-images-idx3-ubyte.gz", images_);
  WriteGzip("train-labels-idx1-ubyte.gz", labels_);
  Write("t10k-images-idx3-ubyte", images_);
  Write("t10k-labels-idx1-ubyte", labels_);
  ExpectValid(ReadFashionMnist(dir_, true), 0.2860f, 0.3530f);
  ExpectValid(ReadFashionMnist(dir_, false), 0.2860f, 0.3530f);
}

TEST_F(DatasetIdxTest, MalformedFilesAreRefusedNamingTheFile) {
  const std::string gz_path = WriteGzip("valid.gz", images_);
  const std::string gz = ReadBack(gz_path);
  std::string bad_crc = gz;
  bad_crc[bad_crc.size() - 8] ^= 1;  // the trailer's CRC-32
  struct Case {
    const char* name;
    std::string bytes;
    bool gzip;
    const char* problem;
  };
  const Case cases[] = {
      {"short", images_.substr(0, images_.size() - 1), false,
       "holds 11 bytes of data, its header says 12"},
      {"long", images_ + "x", false, "holds 13 bytes of data, its header says 12"},
      {"short_gz", images_.substr(0, images_.size() - 1), true,
       "holds 11 bytes of data, its header says 12"},
      {"long_gz", images_ + "x", true, "holds more than the 12 bytes of data its header says"},
      // A gzip bomb: 8 MiB of zeros after a header that says 12 bytes.
      {"bomb_gz", images_ + std::string(8 << 20, '\0'), true,
       "holds more than the 12 bytes of data its header says"},
      {"truncated_trailer_gz", gz.substr(0, gz.size() - 4), false, "truncated gzip data"},
      {"truncated_middle_gz", gz.substr(0, gz.size() / 2), false, "truncated gzip data"},
      {"bad_crc_gz", bad_crc, false, "corrupt gzip data (incorrect data check)"},
      // Dimensions whose product overflows 64 bits, or passes 4 GiB.
      {"overflow", IdxImages(0xffffffff, 0xffffffff, 0xffffffff, ""), false,
       "its header says 4294967295x4294967295x4294967295, more than the 4 GiB"},
      {"over_4gib", IdxImages(0x10000, 0x100, 0x101, ""), false, "more than the 4 GiB"},
      // Claims Fashion-MNIST's size in a few bytes: refused before allocating.
      {"claims_more_than_the_file", IdxImages(60000, 28, 28, "x"), false,
       "holds 1 bytes of data, its header says 47040000"},
      {"claims_more_than_gzip_holds", IdxImages(60000, 28, 28, "x"), true,
       "its header says 47040000 bytes of data, more than"},
      {"zero_height", IdxImages(3, 0, 2, ""), false, "its header says 3x0x2: no data"},
      {"zero_count", IdxImages(0, 2, 2, ""), false, "its header says 0x2x2: no data"},
      {"garbage", "garbage\n", false, "not an IDX file of ubyte images (rank 3)"},
      {"labels_magic", labels_, false, "not an IDX file of ubyte images (rank 3)"},
      {"three_bytes", std::string("\0\0\x08", 3), false, "not an IDX file of ubyte images"},
      {"truncated_header", BigEndian32(0x803) + BigEndian32(3), false, "truncated IDX header"},
      {"truncated_header_gz", BigEndian32(0x803) + BigEndian32(3), true, "truncated IDX header"},
      // A gzip header, then a deflate block of the invalid type 3.
      {"bad_deflate_block", std::string("\x1f\x8b\x08\0\0\0\0\0\0\x03\x07garbage", 18),
       false, "corrupt gzip data (invalid block type)"},
  };
  const std::string labels = Write("labels", labels_);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = c.gzip ? WriteGzip(c.name, c.bytes) : Write(c.name, c.bytes);
    EXPECT_TRUE(IsError(ReadIdx(path, labels, 0, 1), ErrorCode::kIo, path, c.problem));
  }
}

// zlib's gzread ends a stream quietly where a deflate block ends if the file
// stops there: without the trailer, a corrupt byte would load. Random pixels
// make deflate store them, so the cut falls exactly on a block's end.
TEST_F(DatasetIdxTest, GzipWithoutItsTrailerIsRefusedAtAnySize) {
  std::string pixels(64 * 28 * 28, '\0');
  uint32_t state = 12345;
  for (char& p : pixels) p = static_cast<char>((state = state * 1664525u + 1013904223u) >> 24);
  const std::string images = IdxImages(64, 28, 28, pixels);
  const std::string labels = Write("labels", IdxLabels(64, std::string(64, '\3')));
  const std::string gz = ReadBack(WriteGzip("valid.gz", images));
  ASSERT_TRUE(ReadIdx(dir_ + "/valid.gz", labels, 0, 1).ok());
  std::string corrupt = gz.substr(0, gz.size() - 8);
  corrupt[corrupt.size() / 2] ^= 0x5a;  // a stored pixel
  for (const auto& [name, bytes] : {std::pair<std::string, std::string>{"no_trailer", gz.substr(0, gz.size() - 8)},
                                    {"no_trailer_corrupt", corrupt}}) {
    SCOPED_TRACE(name);
    const std::string path = Write(name, bytes);
    EXPECT_TRUE(IsError(ReadIdx(path, labels, 0, 1), ErrorCode::kIo, path, "truncated gzip data"));
  }
  // Several gzip members (`cat a.gz b.gz`) are one file, as gzip reads them;
  // what follows the last member and is no member is ignored, as gzip does.
  const std::string first = ReadBack(WriteGzip("a.gz", images.substr(0, 1000)));
  const std::string second = ReadBack(WriteGzip("b.gz", images.substr(1000)));
  StatusOr<Examples> joined = ReadIdx(Write("joined", first + second), labels, 0, 1);
  ASSERT_TRUE(joined.ok()) << joined.status().ToString();
  EXPECT_EQ(joined->count, 64);
  EXPECT_EQ(joined->images[5000], static_cast<uint8_t>(pixels[5000]) / 255.0f);
  EXPECT_TRUE(ReadIdx(Write("tail", gz + std::string(16, '\0')), labels, 0, 1).ok());
  const std::string cut = Write("cut_second", first + second.substr(0, second.size() - 8));
  EXPECT_TRUE(IsError(ReadIdx(cut, labels, 0, 1), ErrorCode::kIo, cut, "truncated gzip data"));
}

TEST_F(DatasetIdxTest, LabelsMustMatchTheImages) {
  const std::string images = Write("images", images_);
  struct Case {
    const char* name;
    std::string bytes;
    const char* problem;
  };
  const Case cases[] = {
      {"fewer", IdxLabels(2, std::string(2, '\0')),
       "does not hold one label per image (3 images, 2 labels)"},
      {"more", IdxLabels(4, std::string(4, '\0')), "does not hold one label per image"},
      {"short", IdxLabels(3, std::string(2, '\0')), "holds 2 bytes of data, its header says 3"},
      {"long", IdxLabels(3, std::string(4, '\0')), "holds 4 bytes of data, its header says 3"},
      {"images_magic", images_, "not an IDX file of ubyte labels (rank 1)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = Write(c.name, c.bytes);
    EXPECT_TRUE(IsError(ReadIdx(images, path, 0, 1), ErrorCode::kIo, path, c.problem));
  }
}

TEST_F(DatasetIdxTest, NormalizationMustBeFinite) {
  const std::string images = Write("i", images_), labels = Write("l", labels_);
  for (float stddev : {0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN()}) {
    StatusOr<Examples> e = ReadIdx(images, labels, 0.5f, stddev);
    ASSERT_FALSE(e.ok());
    EXPECT_EQ(e.status().code(), ErrorCode::kInvalidArgument);
  }
}

TEST_F(DatasetIdxTest, NonRegularFilesAreRefusedWithoutBlocking) {
  const std::string images = Write("i", images_), labels = Write("l", labels_);
  EXPECT_TRUE(IsError(ReadIdx(dir_, labels, 0, 1), ErrorCode::kIo, dir_, "is a directory"));
  EXPECT_TRUE(IsError(ReadIdx(images, dir_, 0, 1), ErrorCode::kIo, dir_, "is a directory"));
  EXPECT_TRUE(IsError(ReadIdx("/dev/zero", labels, 0, 1), ErrorCode::kIo, "/dev/zero",
                      "is not a regular file"));
  const std::string fifo = MakeFifo("fifo");
  StatusOr<Examples> e =
      WithoutBlocking<Examples>([&] { return ReadIdx(fifo, labels, 0, 1); }, fifo);
  EXPECT_TRUE(IsError(e, ErrorCode::kIo, fifo, "is not a regular file (it is a FIFO)"));
  e = WithoutBlocking<Examples>([&] { return ReadIdx(images, fifo, 0, 1); }, fifo);
  EXPECT_TRUE(IsError(e, ErrorCode::kIo, fifo, "is not a regular file (it is a FIFO)"));
}

TEST_F(DatasetIdxTest, FashionMnistRefusesAFifoNamedLikeItsFiles) {
  // Choosing between X.gz and X used to open X.gz with an ifstream: a FIFO
  // there blocked graphrun forever.
  const std::string fifo = MakeFifo("train-images-idx3-ubyte.gz");
  Write("train-labels-idx1-ubyte", labels_);
  StatusOr<Examples> e =
      WithoutBlocking<Examples>([&] { return ReadFashionMnist(dir_, true); }, fifo);
  EXPECT_TRUE(IsError(e, ErrorCode::kIo, fifo, "is not a regular file (it is a FIFO)"));
}

// ---------------------------------------------------------------------------
// BatchSource and Prefetcher

// `count` 1x2x3 images whose pixels are 10 * i + k (k = 0..5), labels i % 3.
Examples Numbered(int64_t count) {
  Examples e;
  e.count = count, e.channels = 1, e.height = 2, e.width = 3;
  for (int64_t i = 0; i < count; ++i) {
    for (int k = 0; k < 6; ++k) e.images.push_back(static_cast<float>(10 * i + k));
    e.labels.push_back(static_cast<int32_t>(i % 3));
  }
  return e;
}

std::unique_ptr<BatchSource> NumberedSource(int64_t count, int64_t batch) {
  StatusOr<std::unique_ptr<BatchSource>> made =
      BatchSource::Create(Numbered(count), batch, {batch, 1, 2, 3}, 3, /*shuffle=*/true, 42);
  EXPECT_TRUE(made.ok()) << made.status().ToString();
  if (!made.ok()) return nullptr;
  (*made)->set_flip(true);
  return std::move(*made);
}

// Every image of the batch is one of Numbered's examples (flipped or not) with
// its label: nothing was read from outside them.
void ExpectExamples(const Batch& b, int64_t count, int64_t batch) {
  ASSERT_EQ(b.images.size(), static_cast<size_t>(6 * batch));
  ASSERT_EQ(b.labels.size(), static_cast<size_t>(batch));
  for (int64_t j = 0; j < batch; ++j) {
    const float* image = b.images.data() + 6 * j;
    const int64_t i = static_cast<int64_t>(image[0]) / 10;
    ASSERT_GE(i, 0);
    ASSERT_LT(i, count);
    const bool flipped = image[0] != 10 * i;
    for (int row = 0; row < 2; ++row)
      for (int x = 0; x < 3; ++x)
        EXPECT_EQ(image[3 * row + x], 10 * i + 3 * row + (flipped ? 2 - x : x));
    EXPECT_EQ(b.labels[j], i % 3);
  }
}

bool SameBatch(const Batch& a, const Batch& b) {
  return a.images == b.images && a.labels == b.labels;
}

TEST(DatasetBatchSource, SeekMatchesCallingNext) {
  // 7 examples in batches of 2: 3 per epoch, one example dropped each epoch.
  std::unique_ptr<BatchSource> reference = NumberedSource(7, 2);
  ASSERT_NE(reference, nullptr);
  std::vector<Batch> batches(12);
  for (Batch& b : batches) {
    reference->Next(b);
    ExpectExamples(b, 7, 2);
  }
  for (int64_t k = 0; k + 1 < static_cast<int64_t>(batches.size()); ++k) {
    SCOPED_TRACE(k);
    std::unique_ptr<BatchSource> source = NumberedSource(7, 2);
    source->Seek(k);
    Batch b;
    source->Next(b);
    EXPECT_TRUE(SameBatch(b, batches[k]));
    source->Next(b);
    EXPECT_TRUE(SameBatch(b, batches[k + 1]));
  }
  // Negative counts are the caller's bug, taken as 0.
  std::unique_ptr<BatchSource> source = NumberedSource(7, 2);
  source->Seek(-5);
  Batch b;
  source->Next(b);
  EXPECT_TRUE(SameBatch(b, batches[0]));
}

TEST(DatasetBatchSource, SeekFarStaysInBounds) {
  for (int64_t count : {3, 7}) {  // one batch per epoch, or three
    for (int64_t k : {int64_t{1} << 62, INT64_MAX - 1, INT64_MAX, INT64_MIN}) {
      SCOPED_TRACE(std::to_string(count) + " examples, seek " + std::to_string(k));
      std::unique_ptr<BatchSource> source = NumberedSource(count, 2);
      ASSERT_NE(source, nullptr);
      source->Seek(k);
      Batch b;
      for (int i = 0; i < 5; ++i) {  // across epoch boundaries, epoch_ past 2^63
        source->Next(b);
        ExpectExamples(b, count, 2);
      }
    }
  }
}

TEST(DatasetBatchSource, CreateRefusesInconsistentExamples) {
  Examples few_labels = Numbered(4);
  few_labels.labels.pop_back();
  auto made = BatchSource::Create(std::move(few_labels), 2, {2, 1, 2, 3}, 3, true, 1);
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), ErrorCode::kInvalidArgument);

  Examples few_pixels = Numbered(4);
  few_pixels.images.pop_back();
  made = BatchSource::Create(std::move(few_pixels), 2, {2, 1, 2, 3}, 3, true, 1);
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), ErrorCode::kInvalidArgument);

  made = BatchSource::Create(Numbered(4), 0, {0, 1, 2, 3}, 3, true, 1);
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), ErrorCode::kInvalidArgument);

  made = BatchSource::Create(Numbered(4), 2, {2, 1, 2, 3}, 2, true, 1);  // label 2 of example 2
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(made.status().message(), "label 2 of example 2 is not in [0, 2) for this model");

  made = BatchSource::Create(Numbered(1), 2, {2, 1, 2, 3}, 3, true, 1);
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), ErrorCode::kInvalidArgument);
}

TEST(DatasetPrefetcher, YieldsTheBatchesOfNextAtAnyDepth) {
  for (int depth : {1, 2, 5}) {
    SCOPED_TRACE(depth);
    std::unique_ptr<BatchSource> direct = NumberedSource(7, 2);
    std::unique_ptr<BatchSource> prefetched = NumberedSource(7, 2);
    ASSERT_NE(direct, nullptr);
    ASSERT_NE(prefetched, nullptr);
    direct->Seek(4);
    prefetched->Seek(4);
    Prefetcher prefetcher(*prefetched, depth);
    Batch b;
    for (int i = 0; i < 12; ++i) {
      SCOPED_TRACE(i);
      direct->Next(b);
      const Batch& p = prefetcher.Next();
      EXPECT_TRUE(SameBatch(p, b));
      // The queue fills behind the batch the caller holds (the step), up
      // to its depth, without another call; the batch stays the caller's.
      if (i % 4 == 0) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (prefetcher.queued() < depth && std::chrono::steady_clock::now() < until)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        EXPECT_EQ(prefetcher.queued(), depth);
      }
      EXPECT_TRUE(SameBatch(p, b));
    }
  }
}

}  // namespace
}  // namespace graphc::runtime
