// The CUDA libraries are not part of the `shardscope` executable: they are in
// the CUDA module, libshardscope_cuda.so beside it (engine/cuda_module.h),
// loaded only by GPU commands. Checked here without a GPU: the executable's
// dynamic section, the module's, and `run --backend cuda` when the module is
// missing, not loadable, not a module or of another build: a message naming
// the file and what to do, exit 2, no rank started and no fallback to the CPU.
#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "tests/cli/run_cli.h"
#include "tests/temp_dir.h"

using shardscope::test::run_cli;

namespace {

namespace fs = std::filesystem;

std::string command_output(const std::string& cmd) {
  std::string out;
  FILE* pipe = popen((cmd + " 2>&1").c_str(), "r");
  if (!pipe) return out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  pclose(pipe);
  return out;
}

// The NEEDED entries of an ELF file's dynamic section (readelf -d).
std::vector<std::string> needed(const std::string& file) {
  const std::string out = command_output("readelf -d '" + file + "'");
  std::vector<std::string> libs;
  const std::regex re(R"(\(NEEDED\)\s+Shared library: \[([^\]]+)\])");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator();
       ++it)
    libs.push_back((*it)[1].str());
  return libs;
}

bool is_cuda_library(const std::string& soname) {
  for (const char* prefix :
       {"libcublas", "libcudart", "libcupti", "libnccl", "libcuda.", "libcudnn", "libnvrtc"})
    if (soname.rfind(prefix, 0) == 0) return true;
  return false;
}

const std::string kSmall = "run --backend cuda --model gpt2-tiny --set seq_len=16 --steps 1";

#ifdef SHARDSCOPE_TEST_CUDA_MODULE
// What every refusal of a missing or bad module has in common.
void check_refused(const shardscope::test::CliResult& r) {
  CHECK(r.status == 2);
  CHECK(r.output.find("[rank ") == std::string::npos);      // no rank started
  CHECK(r.output.find("engine-cpu") == std::string::npos);  // no CPU run instead
  CHECK(r.output.find("loss") == std::string::npos);        // no training at all
}
#endif

}  // namespace

TEST_CASE("the shardscope executable links no CUDA library", "[cli][cuda_module]") {
  const std::vector<std::string> libs = needed(SHARDSCOPE_CLI);
  INFO("NEEDED of " << SHARDSCOPE_CLI << ": " << Catch::Detail::stringify(libs));
  REQUIRE(!libs.empty());  // readelf worked: every executable needs libc
  for (const std::string& lib : libs) CHECK_FALSE(is_cuda_library(lib));
}

#ifdef SHARDSCOPE_TEST_CUDA_MODULE
TEST_CASE("the CUDA module beside the executable links the CUDA libraries and exports one symbol",
          "[cli][cuda_module]") {
  const fs::path module = fs::path(SHARDSCOPE_CLI).parent_path() / "libshardscope_cuda.so";
  REQUIRE(fs::exists(module));
  CHECK(fs::equivalent(module, SHARDSCOPE_TEST_CUDA_MODULE));
  const std::vector<std::string> libs = needed(module.string());
  INFO("NEEDED of " << module << ": " << Catch::Detail::stringify(libs));
  auto has = [&](const std::string& prefix) {
    for (const std::string& lib : libs)
      if (lib.rfind(prefix, 0) == 0) return true;
    return false;
  };
  CHECK(has("libcublasLt"));
  CHECK(has("libnccl"));
  CHECK(has("libcupti"));
  CHECK(has("libcudnn.so.9"));   // the cuDNN attention (a shared library: no driver to load)
  CHECK_FALSE(has("libcuda."));  // the driver never
  // The version script (engine/run/cuda_module.map): the entry point only.
  const std::string symbols =
      command_output("nm -D --defined-only '" + module.string() + "' | awk '{print $3}'");
  INFO("exported: " << symbols);
  CHECK(symbols == "shardscope_cuda_module_v1\n");
}

TEST_CASE("run --backend cuda without its module names the file and what to do",
          "[cli][cuda_module]") {
  shardscope::test::TempDir dir("shardscope_cuda_module");
  SECTION("SHARDSCOPE_CUDA_MODULE names a file that does not exist") {
    const std::string missing = (dir.path / "nowhere" / "libshardscope_cuda.so").string();
    const auto r = run_cli(kSmall + " --nproc 1", "SHARDSCOPE_CUDA_MODULE=" + missing);
    INFO(r.output);
    check_refused(r);
    CHECK(r.output.find(missing + " ($SHARDSCOPE_CUDA_MODULE) does not exist") !=
          std::string::npos);
  }
  SECTION("no module beside a copy of the executable") {
    const fs::path exe = dir.path / "shardscope";
    fs::copy_file(SHARDSCOPE_CLI, exe);
    for (const std::string extra : {" --nproc 1", " --emulate-world 4 --rank 1"}) {
      const auto r = run_cli(kSmall + extra, "env -u SHARDSCOPE_CUDA_MODULE", exe.string());
      INFO(extra << ": " << r.output);
      check_refused(r);
      CHECK(r.output.find((dir.path / "libshardscope_cuda.so").string() + " does not exist") !=
            std::string::npos);
      CHECK(r.output.find("beside the shardscope executable") != std::string::npos);
    }
    // Commands without a GPU do not look for it.
    const auto plan = run_cli("plan --model gpt2-tiny --world 2", "", exe.string());
    INFO(plan.output);
    CHECK(plan.status == 0);
  }
  SECTION("a file the dynamic loader refuses: dlerror's text") {
    const std::string junk = (dir.path / "libshardscope_cuda.so").string();
    std::ofstream(junk) << "not an ELF file\n";
    const auto r = run_cli(kSmall + " --nproc 1", "SHARDSCOPE_CUDA_MODULE=" + junk);
    INFO(r.output);
    check_refused(r);
    CHECK(r.output.find("cannot load the CUDA module " + junk) != std::string::npos);
    CHECK((r.output.find("invalid ELF header") != std::string::npos ||
           r.output.find("file too short") != std::string::npos));
    CHECK(r.output.find("LD_LIBRARY_PATH") != std::string::npos);
  }
  SECTION("a shared object without the entry point") {
    const auto r = run_cli(kSmall + " --nproc 1", std::string("SHARDSCOPE_CUDA_MODULE=") +
                                                      SHARDSCOPE_TEST_MODULE_NO_ENTRY);
    INFO(r.output);
    check_refused(r);
    CHECK(r.output.find(std::string(SHARDSCOPE_TEST_MODULE_NO_ENTRY) +
                        " is not a shardscope CUDA module") != std::string::npos);
    CHECK(r.output.find("shardscope_cuda_module_v1") != std::string::npos);  // dlerror names it
  }
  SECTION("the module of another ABI") {
    const std::string other = SHARDSCOPE_TEST_MODULE_OTHER_ABI;
    const auto r = run_cli(kSmall + " --nproc 1", "SHARDSCOPE_CUDA_MODULE=" + other);
    INFO(r.output);
    check_refused(r);
    CHECK(r.output.find(other + " is the CUDA module of another shardscope build (module ABI "
                                "999, entry ") != std::string::npos);
    CHECK(r.output.find("this shardscope: ABI 1, entry ") != std::string::npos);
  }
  SECTION("the module of another build of this ABI") {
    const std::string other = SHARDSCOPE_TEST_MODULE_OTHER_BUILD;
    const auto r = run_cli(kSmall + " --nproc 1", "SHARDSCOPE_CUDA_MODULE=" + other);
    INFO(r.output);
    check_refused(r);
    CHECK(r.output.find(other + " is the CUDA module of another shardscope build (module: ABI 1, "
                                "build 'another build'") != std::string::npos);
    CHECK(r.output.find("use the libshardscope_cuda.so built with this executable") !=
          std::string::npos);
  }
}

TEST_CASE("the real module loads: the device query answers", "[cli][cuda_module]") {
  // On a machine without a driver the runtime's error, on a GPU machine a run:
  // either way the module was found, loaded and accepted.
  const auto r = run_cli(kSmall + " --nproc 1");
  INFO(r.output);
  CHECK(r.output.find("CUDA module") == std::string::npos);
}
#else
TEST_CASE("run --backend cuda in a build without CUDA says so, whatever SHARDSCOPE_CUDA_MODULE",
          "[cli][cuda_module]") {
  const auto r = run_cli(kSmall + " --nproc 1", "SHARDSCOPE_CUDA_MODULE=/nowhere/x.so");
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK(r.output.find("SHARDSCOPE_CUDA=OFF") != std::string::npos);
  CHECK(r.output.find("/nowhere/x.so") == std::string::npos);
}
#endif
