#include <catch2/catch.hpp>

#include <string>

#include "qload/runtime/device.hpp"

using namespace qload;

namespace {

Device cpu(int index) {
  return Device{Device::Kind::kCpu, index};
}
Device gpu(int index) {
  return Device{Device::Kind::kCuda, index};
}

// Every rejection is kInvalidArgument and quotes what the user wrote.
void check_rejected(std::string_view text, const Errc code, const std::string& message) {
  INFO("text: '" << text << "', message: " << message);
  CHECK(code == Errc::kInvalidArgument);
  CHECK(message.find("'" + std::string(text) + "'") != std::string::npos);
}

}  // namespace

TEST_CASE("devices parse from their usual spellings", "[device]") {
  CHECK(parse_device("cpu").value() == cpu(0));
  CHECK(parse_device("cpu:0").value() == cpu(0));
  CHECK(parse_device("cpu:3").value() == cpu(3));
  CHECK(parse_device("cuda").value() == gpu(0));
  CHECK(parse_device("cuda:0").value() == gpu(0));
  CHECK(parse_device("cuda:7").value() == gpu(7));
  CHECK(parse_device("cuda:1023").value() == gpu(1023));
  CHECK(parse_device("cuda:7")->is_cuda());
  CHECK(parse_device("cpu:2")->is_cpu());
}

TEST_CASE("devices print in the form they parse from", "[device]") {
  CHECK(cpu(0).to_string() == "cpu");
  CHECK(cpu(2).to_string() == "cpu:2");
  CHECK(gpu(0).to_string() == "cuda:0");
  CHECK(gpu(1023).to_string() == "cuda:1023");
  for (const Device d : {cpu(0), cpu(1), cpu(1023), gpu(0), gpu(5), gpu(1023)}) {
    INFO(d.to_string());
    CHECK(parse_device(d.to_string()).value() == d);
  }
  CHECK(Device{} == cpu(0));
  CHECK(cpu(5) < gpu(0));  // cpu before cuda, then by index: a stable order for plans
  CHECK(gpu(1) < gpu(2));
}

TEST_CASE("malformed devices are rejected quoting the text", "[device]") {
  for (const char* bad : {"",         "gpu:0",   "cuda:",    "cuda:-1",  "cuda:+1", "cuda:1024", "cuda:99999999999",
                          "cuda:01x", "cuda:01", "cuda:1x",  "cuda :0",  " cuda:0", "cuda:0 ",   "cuda: 0",
                          "CUDA:0",   "cpu:",    "cpu:1024", "cuda:0:1", "cuda0",   "cu",        ":0",
                          "cuda,cpu"}) {
    auto r = parse_device(bad);
    REQUIRE_FALSE(r);
    check_rejected(bad, r.error().code(), r.error().message());
  }
}

TEST_CASE("device lists parse in order", "[device]") {
  CHECK(parse_device_list("cuda:0").value() == std::vector{gpu(0)});
  CHECK(parse_device_list("cuda:0,cuda:1").value() == std::vector{gpu(0), gpu(1)});
  CHECK(parse_device_list("cuda:3,cpu,cuda").value() == std::vector{gpu(3), cpu(0), gpu(0)});
  CHECK(parse_device_list("cpu:1,cpu:0").value() == std::vector{cpu(1), cpu(0)});
}

TEST_CASE("device lists with empty elements, duplicates or bad devices are rejected", "[device]") {
  for (const char* bad : {"", ",", "cuda:0,", ",cuda:0", "cuda:0,,cuda:1", "cuda:0,cuda:0", "cuda,cuda:0", "cpu,cpu:0",
                          "cuda:0,gpu:1", "cuda:0, cuda:1", "cuda:0 ,cuda:1"}) {
    auto r = parse_device_list(bad);
    REQUIRE_FALSE(r);
    check_rejected(bad, r.error().code(), r.error().message());
  }
  auto dup = parse_device_list("cuda:1,cuda:0,cuda:1");
  REQUIRE_FALSE(dup);
  CHECK_THAT(dup.error().message(), Catch::Contains("cuda:1 twice"));
  auto inner = parse_device_list("cuda:0,gpu:1");
  REQUIRE_FALSE(inner);
  CHECK_THAT(inner.error().message(), Catch::Contains("'gpu:1' is not a device"));
}

TEST_CASE("control characters in a rejected device are escaped", "[device]") {
  auto r = parse_device("cuda:\x1b[2J");
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::kInvalidArgument);
  CHECK(r.error().message().find('\x1b') == std::string::npos);
}
