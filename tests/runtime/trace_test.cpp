// TraceRecorder / TraceSpan: Chrome trace JSON with one track per lane, counters, safe
// handling of hostile names, and atomic writes.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "qload/runtime/trace.hpp"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using qload::TraceRecorder;
using qload::TraceSpan;
using Clock = TraceRecorder::Clock;
using std::chrono::microseconds;

// A fresh directory, removed with everything in it at the end of the test.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string templ = std::string(base && *base ? base : "/tmp") + "/qload-trace-test-XXXXXX";
    REQUIRE(::mkdtemp(templ.data()) != nullptr);
    path_ = templ;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> list_dir(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  return names;
}

std::vector<json> events_with_phase(const json& trace, const std::string& phase) {
  std::vector<json> out;
  for (const auto& e : trace.at("traceEvents"))
    if (e.at("ph") == phase) out.push_back(e);
  return out;
}

}  // namespace

TEST_CASE("TraceRecorder starts empty and produces a valid trace", "[trace]") {
  const TraceRecorder trace;
  CHECK(trace.event_count() == 0);
  const json j = json::parse(trace.to_json());
  REQUIRE(j.contains("traceEvents"));
  CHECK(j.at("traceEvents").is_array());
  CHECK(j.at("displayTimeUnit") == "ms");
  // Only the process name metadata.
  REQUIRE(j.at("traceEvents").size() == 1);
  const json& meta = j.at("traceEvents")[0];
  CHECK(meta.at("ph") == "M");
  CHECK(meta.at("name") == "process_name");
  CHECK(meta.at("args").at("name") == "qload");
  CHECK(meta.at("pid") == static_cast<int>(::getpid()));
}

TEST_CASE("TraceRecorder complete events and counters become Chrome trace JSON", "[trace]") {
  TraceRecorder trace;
  const auto t0 = Clock::now() + microseconds(1000);
  trace.complete("read", "chunk 0", t0, t0 + microseconds(2500), 4096);
  trace.complete("verify", "chunk 0", t0 + microseconds(2500), t0 + microseconds(3000));
  trace.complete("read", "chunk 1", t0 + microseconds(2500), t0 + microseconds(4000), 8192);
  trace.counter("staging bytes", 12345, t0 + microseconds(100));
  CHECK(trace.event_count() == 4);

  const json j = json::parse(trace.to_json());
  const int pid = static_cast<int>(::getpid());

  // One thread_name metadata record per lane, numbered in order of first use.
  std::map<std::string, std::int64_t> lane_tid;
  for (const auto& m : events_with_phase(j, "M")) {
    CHECK(m.at("pid") == pid);
    if (m.at("name") == "thread_name")
      lane_tid[m.at("args").at("name").get<std::string>()] = m.at("tid").get<std::int64_t>();
  }
  REQUIRE(lane_tid.size() == 2);
  REQUIRE(lane_tid.count("read") == 1);
  REQUIRE(lane_tid.count("verify") == 1);
  CHECK(lane_tid["read"] != lane_tid["verify"]);
  CHECK(lane_tid["read"] == 1);
  CHECK(lane_tid["verify"] == 2);

  const auto complete = events_with_phase(j, "X");
  REQUIRE(complete.size() == 3);
  for (const auto& e : complete) {
    CAPTURE(e.dump());
    CHECK(e.at("pid") == pid);
    CHECK(e.at("ts").is_number_integer());
    CHECK(e.at("dur").is_number_integer());
    CHECK(e.at("tid").is_number_integer());
    CHECK(e.at("ts").get<std::int64_t>() >= 1000);
  }
  // In recording order.
  CHECK(complete[0].at("name") == "chunk 0");
  CHECK(complete[0].at("tid") == lane_tid["read"]);
  CHECK(complete[0].at("cat") == "read");
  CHECK(complete[0].at("dur") == 2500);
  CHECK(complete[0].at("args").at("bytes") == 4096);

  CHECK(complete[1].at("tid") == lane_tid["verify"]);
  CHECK(complete[1].at("cat") == "verify");
  CHECK(complete[1].at("dur") == 500);
  CHECK_FALSE(complete[1].contains("args"));  // no bytes given
  CHECK(complete[1].at("ts").get<std::int64_t>() - complete[0].at("ts").get<std::int64_t>() == 2500);

  CHECK(complete[2].at("name") == "chunk 1");
  CHECK(complete[2].at("tid") == lane_tid["read"]);
  CHECK(complete[2].at("dur") == 1500);
  CHECK(complete[2].at("args").at("bytes") == 8192);

  const auto counters = events_with_phase(j, "C");
  REQUIRE(counters.size() == 1);
  CHECK(counters[0].at("name") == "staging bytes");
  CHECK(counters[0].at("args").at("value") == 12345);
  CHECK(counters[0].at("ts").get<std::int64_t>() >= 100);
  CHECK(counters[0].at("pid") == pid);
}

TEST_CASE("TraceRecorder clamps an end before the start to zero duration", "[trace]") {
  TraceRecorder trace;
  const auto t = Clock::now();
  trace.complete("read", "backwards", t, t - microseconds(50));
  const auto complete = events_with_phase(json::parse(trace.to_json()), "X");
  REQUIRE(complete.size() == 1);
  CHECK(complete[0].at("dur") == 0);
}

TEST_CASE("TraceRecorder names with invalid UTF-8 do not throw and still give valid JSON", "[trace]") {
  TraceRecorder trace;
  const auto t = Clock::now();
  trace.complete("lane\xff", "tensor\xc3\x28\x80", t, t + microseconds(1));
  trace.counter("bad\xfe counter", 1, t);
  trace.complete("read", "quote\" back\\slash \x01 nl\n", t, t + microseconds(1));
  std::string text;
  REQUIRE_NOTHROW(text = trace.to_json());
  json j;
  REQUIRE_NOTHROW(j = json::parse(text));
  const auto complete = events_with_phase(j, "X");
  REQUIRE(complete.size() == 2);
  // Invalid bytes become U+FFFD; the valid prefix survives.
  const auto name = complete[0].at("name").get<std::string>();
  CHECK(name.rfind("tensor", 0) == 0);
  CHECK(name.find("\xef\xbf\xbd") != std::string::npos);
  // Valid but special characters round-trip exactly.
  CHECK(complete[1].at("name") == "quote\" back\\slash \x01 nl\n");
}

TEST_CASE("TraceRecorder write creates the file and leaves no .tmp behind", "[trace]") {
  TempDir dir;
  TraceRecorder trace;
  const auto t = Clock::now();
  trace.complete("read", "chunk", t, t + microseconds(10), 1);
  const fs::path path = dir.path() / "trace.json";

  const auto status = trace.write(path.string());
  REQUIRE(status.has_value());
  CHECK(fs::exists(path));
  CHECK_FALSE(fs::exists(path.string() + ".tmp"));
  CHECK(list_dir(dir.path()) == std::vector<std::string>{"trace.json"});

  const std::string text = read_file(path);
  CHECK(text == trace.to_json());
  const json j = json::parse(text);
  CHECK(events_with_phase(j, "X").size() == 1);

  // Writing again replaces the file.
  trace.complete("read", "chunk 2", t, t + microseconds(10));
  REQUIRE(trace.write(path.string()).has_value());
  CHECK(events_with_phase(json::parse(read_file(path)), "X").size() == 2);
  CHECK(list_dir(dir.path()) == std::vector<std::string>{"trace.json"});
}

TEST_CASE("TraceRecorder write into a missing directory fails with kNotFound", "[trace]") {
  TempDir dir;
  const TraceRecorder trace;
  const fs::path path = dir.path() / "no-such-dir" / "trace.json";
  const auto status = trace.write(path.string());
  REQUIRE_FALSE(status.has_value());
  CHECK(status.error().code() == qload::Errc::kNotFound);
  REQUIRE(status.error().file().has_value());
  CHECK(list_dir(dir.path()).empty());
}

TEST_CASE("TraceRecorder write that fails at the rename leaves no .tmp behind", "[trace]") {
  TempDir dir;
  const TraceRecorder trace;
  // The destination is a non-empty directory, so the rename over it fails.
  const fs::path path = dir.path() / "out";
  fs::create_directory(path);
  { std::ofstream(path / "keep") << "x"; }
  const auto status = trace.write(path.string());
  REQUIRE_FALSE(status.has_value());
  CHECK(fs::is_directory(path));
  CHECK(list_dir(dir.path()) == std::vector<std::string>{"out"});  // no "out.tmp" left over
}

TEST_CASE("TraceSpan records one complete event on its lane when it ends", "[trace]") {
  TraceRecorder trace;
  {
    TraceSpan span(&trace, "h2d cuda:0", "copy 3", 65536);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    CHECK(trace.event_count() == 0);  // nothing until the span ends
  }
  CHECK(trace.event_count() == 1);
  const json j = json::parse(trace.to_json());
  const auto complete = events_with_phase(j, "X");
  REQUIRE(complete.size() == 1);
  CHECK(complete[0].at("name") == "copy 3");
  CHECK(complete[0].at("cat") == "h2d cuda:0");
  CHECK(complete[0].at("args").at("bytes") == 65536);
  CHECK(complete[0].at("dur").get<std::int64_t>() >= 2000);
}

TEST_CASE("TraceSpan with a null recorder does nothing", "[trace]") {
  TraceRecorder unrelated;
  { TraceSpan span(nullptr, "read", "chunk 0", 123); }
  CHECK(unrelated.event_count() == 0);
  SUCCEED("destroying a span with no recorder is a no-op");
}

TEST_CASE("TraceRecorder records from several threads at once", "[trace]") {
  TraceRecorder trace;
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&trace, t] {
        const std::string lane = "lane " + std::to_string(t);
        for (int i = 0; i < 250; ++i) {
          TraceSpan span(&trace, lane, "event");
          if (i % 10 == 0) trace.counter("progress", i);
        }
      });
  }
  CHECK(trace.event_count() == 4 * 250 + 4 * 25);
  const json j = json::parse(trace.to_json());
  CHECK(events_with_phase(j, "X").size() == 1000);
  CHECK(events_with_phase(j, "C").size() == 100);
  std::size_t lanes = 0;
  for (const auto& m : events_with_phase(j, "M"))
    if (m.at("name") == "thread_name") ++lanes;
  CHECK(lanes == 4);
}
