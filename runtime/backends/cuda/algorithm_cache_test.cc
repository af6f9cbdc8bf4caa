// The cuDNN algorithm cache's file handling (no GPU needed): choices survive
// a process, two processes' choices merge, and a damaged or hostile file
// costs lookups, never a crash or a wrong value.

#include "runtime/backends/cuda/algorithm_cache.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace graphc::runtime {
namespace {

class AlgorithmCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/graphc-algorithm-cache-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    path_ = dir_ + "/sub/cache.tsv";  // a directory Save must create
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "' '" + dir_ + ".lock'").c_str()); }

  void Write(const std::string& path, const std::string& contents) {
    std::ofstream(path, std::ios::binary) << contents;
  }
  std::string Contents(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  std::string dir_, path_;
};

TEST_F(AlgorithmCacheTest, ChoicesSurviveTheProcessThatMadeThem) {
  {
    AlgorithmCache cache(path_);
    EXPECT_FALSE(cache.Find("H100 sm_90|cudnn 91900|fp32|conv a").has_value());
    cache.Put("H100 sm_90|cudnn 91900|fp32|conv a", {1, 2});
    cache.Put("H100 sm_90|cudnn 91900|fp32|conv b", {7, 0});
    ASSERT_TRUE(cache.Save().ok());
  }
  AlgorithmCache again(path_);
  EXPECT_EQ(again.Find("H100 sm_90|cudnn 91900|fp32|conv a"), (AlgorithmCache::Choice{1, 2}));
  EXPECT_EQ(again.Find("H100 sm_90|cudnn 91900|fp32|conv b"), (AlgorithmCache::Choice{7, 0}));
  EXPECT_FALSE(again.Find("H100 sm_90|cudnn 91900|tf32|conv a").has_value());
  EXPECT_EQ(again.hits(), 2);
  EXPECT_EQ(again.skipped_lines(), 0);
  EXPECT_EQ(again.load_problem(), "");
}

TEST_F(AlgorithmCacheTest, TwoProcessesChoicesMerge) {
  AlgorithmCache first(path_), second(path_);
  EXPECT_FALSE(first.Find("a").has_value());
  EXPECT_FALSE(second.Find("b").has_value());
  first.Put("a", {1, 1});
  second.Put("b", {2, 2});
  second.Put("a", {3, 3});  // the later save wins a key both chose
  ASSERT_TRUE(first.Save().ok());
  ASSERT_TRUE(second.Save().ok());
  AlgorithmCache reader(path_);
  EXPECT_EQ(reader.Find("a"), (AlgorithmCache::Choice{3, 3}));
  EXPECT_EQ(reader.Find("b"), (AlgorithmCache::Choice{2, 2}));
}

TEST_F(AlgorithmCacheTest, BadLinesAreSkippedAndCounted) {
  ASSERT_EQ(mkdir((dir_ + "/sub").c_str(), 0755), 0);
  Write(path_, std::string("# graphc cuDNN algorithm cache, version 1\n") +
                   "good\t3\t1\n"
                   "no tabs at all\n"
                   "one\ttab\n"
                   "negative\t-1\t0\n"
                   "big\t64\t0\n"
                   "huge\t99999999999999999999\t0\n"
                   "letters\t1x\t0\n"
                   "empty\t\t0\n"
                   "\t4\t0\n"
                   "control\x01key\t1\t0\n"
                   "high\xc3\xa9\t1\t0\n"
                   "trailing\t1\t0\t\n"
                   "last\t5\t2");  // no final newline
  AlgorithmCache cache(path_);
  EXPECT_EQ(cache.Find("good"), (AlgorithmCache::Choice{3, 1}));
  EXPECT_EQ(cache.Find("last"), (AlgorithmCache::Choice{5, 2}));
  for (const char* key : {"negative", "big", "huge", "letters", "empty", "control\x01key",
                          "trailing", "one"})
    EXPECT_FALSE(cache.Find(key).has_value()) << key;
  EXPECT_EQ(cache.skipped_lines(), 11);
}

TEST_F(AlgorithmCacheTest, AFileThatIsNoCacheIsReadAsEmptyAndLeftAlone) {
  ASSERT_EQ(mkdir((dir_ + "/sub").c_str(), 0755), 0);
  const std::string other = "key\t1\t1\nthe user's own file\n";
  Write(path_, other);
  AlgorithmCache cache(path_);
  EXPECT_FALSE(cache.Find("key").has_value());
  EXPECT_NE(cache.load_problem().find("first line"), std::string::npos) << cache.load_problem();
  cache.Put("key", {2, 2});
  Status saved = cache.Save();
  EXPECT_FALSE(saved.ok());
  EXPECT_NE(saved.message().find("left as it is"), std::string::npos) << saved.message();
  EXPECT_EQ(Contents(path_), other);
}

TEST_F(AlgorithmCacheTest, OversizedFilesAndDirectoriesAreNotRead) {
  ASSERT_EQ(mkdir((dir_ + "/sub").c_str(), 0755), 0);
  Write(path_, "# graphc cuDNN algorithm cache, version 1\n" +
                   std::string(AlgorithmCache::kMaxFileBytes, 'x'));
  AlgorithmCache big(path_);
  EXPECT_FALSE(big.Find("x").has_value());
  EXPECT_NE(big.load_problem().find("larger than"), std::string::npos);
  AlgorithmCache directory(dir_);
  EXPECT_FALSE(directory.Find("x").has_value());
  EXPECT_EQ(directory.load_problem(), "not a regular file");
  directory.Put("x", {1, 1});
  EXPECT_FALSE(directory.Save().ok());
}

TEST_F(AlgorithmCacheTest, DisabledCacheNeitherReadsNorWrites) {
  AlgorithmCache cache("");
  cache.Put("a", {1, 1});
  EXPECT_TRUE(cache.Save().ok());
  EXPECT_FALSE(cache.Find("a").has_value());
  EXPECT_NE(access((dir_ + "/sub").c_str(), F_OK), 0);
}

TEST_F(AlgorithmCacheTest, UnprintableKeysAndValuesOutOfRangeAreNotWritten) {
  AlgorithmCache cache(path_);
  cache.Put("tab\tkey", {1, 1});
  cache.Put("newline\nkey", {1, 1});
  cache.Put(std::string(AlgorithmCache::kMaxKeyBytes + 1, 'k'), {1, 1});
  cache.Put("negative", {-1, 0});
  cache.Put("large", {0, AlgorithmCache::kMaxValue + 1});
  cache.Put("fine", {AlgorithmCache::kMaxValue, 0});
  ASSERT_TRUE(cache.Save().ok());
  EXPECT_EQ(Contents(path_), "# graphc cuDNN algorithm cache, version 1\nfine\t63\t0\n");
}

TEST_F(AlgorithmCacheTest, AFullFileKeepsTheChoicesJustMade) {
  ASSERT_EQ(mkdir((dir_ + "/sub").c_str(), 0755), 0);
  std::string full = "# graphc cuDNN algorithm cache, version 1\n";
  for (int i = 0; full.size() < AlgorithmCache::kMaxFileBytes - 100; ++i)
    full += "old key " + std::to_string(1000000 + i) + "\t1\t1\n";
  Write(path_, full);
  AlgorithmCache cache(path_);
  cache.Put("zzz sorts after every old key", {5, 3});
  ASSERT_TRUE(cache.Save().ok());
  EXPECT_LE(Contents(path_).size(), AlgorithmCache::kMaxFileBytes);
  AlgorithmCache reader(path_);
  EXPECT_EQ(reader.Find("zzz sorts after every old key"), (AlgorithmCache::Choice{5, 3}));
  EXPECT_EQ(reader.load_problem(), "");
}

TEST_F(AlgorithmCacheTest, DroppedChoicesAreNotCountedAsHits) {
  AlgorithmCache writer(path_);
  writer.Put("a", {1, 1});
  ASSERT_TRUE(writer.Save().ok());
  AlgorithmCache cache(path_);
  ASSERT_TRUE(cache.Find("a").has_value());
  cache.Drop("a");
  EXPECT_EQ(cache.hits(), 0);
  EXPECT_FALSE(cache.Find("a").has_value());
}

TEST(AlgorithmCacheDefaultPath, FollowsTheEnvironment) {
  const char* saved_cache = std::getenv("GRAPHC_CUDNN_CACHE");
  const std::string cache_value = saved_cache ? saved_cache : "";
  const char* saved_home = std::getenv("HOME");
  const std::string home_value = saved_home ? saved_home : "";
  setenv("GRAPHC_CUDNN_CACHE", "/somewhere/algorithms.tsv", 1);
  EXPECT_EQ(AlgorithmCache::DefaultPath(), "/somewhere/algorithms.tsv");
  setenv("GRAPHC_CUDNN_CACHE", "off", 1);
  EXPECT_EQ(AlgorithmCache::DefaultPath(), "");
  unsetenv("GRAPHC_CUDNN_CACHE");
  setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(AlgorithmCache::DefaultPath(), "/xdg/graphc/cudnn-algorithms.tsv");
  setenv("XDG_CACHE_HOME", "relative", 1);  // not absolute: ignored, as the spec says
  setenv("HOME", "/home/u", 1);
  EXPECT_EQ(AlgorithmCache::DefaultPath(), "/home/u/.cache/graphc/cudnn-algorithms.tsv");
  unsetenv("XDG_CACHE_HOME");
  if (saved_cache) setenv("GRAPHC_CUDNN_CACHE", cache_value.c_str(), 1);
  if (saved_home) setenv("HOME", home_value.c_str(), 1);
}

}  // namespace
}  // namespace graphc::runtime
