// CuptiRecorder and the injection library where the machine decides the
// outcome: without a CUDA driver (CI) they must fail clearly, never crash;
// with one, they must start. Both branches assert.
#include <catch2/catch.hpp>

#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "profiler/cupti/cupti_internal.h"
#include "profiler/cupti/cupti_recorder.h"
#include "tests/temp_dir.h"
#include "traces/trace_io.h"

using namespace shardscope;
namespace fs = std::filesystem;

namespace {

bool driver_present() {
  void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (h) dlclose(h);
  return h != nullptr;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// In a child process (InitializeInjection runs once per process): dlopens the
// injection library, calls InitializeInjection with SHARDSCOPE_PROFILE_DIR =
// `dir` ("" = unset), and exits through exit() (atexit handlers run) with
// InitializeInjection's return value, or 100 + a step when a step failed.
int initialize_injection_in_child(const std::string& dir) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (dir.empty())
      unsetenv("SHARDSCOPE_PROFILE_DIR");
    else
      setenv("SHARDSCOPE_PROFILE_DIR", dir.c_str(), 1);
    unsetenv("RANK");
    void* lib = dlopen(SHARDSCOPE_INJECT_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!lib) std::exit(101);
    auto init = reinterpret_cast<int (*)()>(dlsym(lib, "InitializeInjection"));
    if (!init) std::exit(102);
    std::exit(init());
  }
  int raw = 0;
  waitpid(pid, &raw, 0);
  return WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
}

}  // namespace

TEST_CASE("CuptiRecorder: a bad buffer size is refused before CUPTI is touched",
          "[profiler][cupti]") {
  profiler::CuptiConfig config;
  config.buffer_bytes = 1000;
  CHECK_THROWS_AS(profiler::CuptiRecorder::start(config), profiler::ProfilerError);
  CHECK_THROWS_WITH(profiler::CuptiRecorder::start(config), Catch::Contains("buffer_bytes = 1000"));
}

TEST_CASE("CuptiRecorder: no driver is a clear error, a driver lets it start",
          "[profiler][cupti]") {
  if (!driver_present()) {
    CHECK_THROWS_WITH(
        profiler::CuptiRecorder::start(),
        Catch::Contains("CUPTI found no CUDA driver") && Catch::Contains("libcuda.so.1"));
    return;
  }
  auto recorder = profiler::CuptiRecorder::start();
  const profiler::Recording r = recorder->take();
  CHECK(r.kernels.empty());  // nothing launched
  CHECK(r.cupti_api_version / 10000 == 13);
  CHECK_THROWS_WITH(profiler::CuptiRecorder::start(), Catch::Contains("another profiler"));
}

TEST_CASE("inject library: without SHARDSCOPE_PROFILE_DIR it returns 1 and records nothing",
          "[profiler][inject]") {
  CHECK(initialize_injection_in_child("") == 1);
}

TEST_CASE("inject library: a process that cannot record leaves <pid>.error, or its trace",
          "[profiler][inject]") {
  test::TempDir dir;
  CHECK(initialize_injection_in_child(dir.path.string()) == 1);
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir.path)) files.push_back(e.path());
  REQUIRE(files.size() == 1);
  if (!driver_present()) {
    CHECK(files[0].extension() == ".error");
    CHECK_THAT(read_text(files[0]), Catch::Contains("CUPTI found no CUDA driver"));
    return;
  }
  // With a driver the process recorded (nothing: it never used CUDA) and wrote
  // its trace at exit.
  REQUIRE(files[0].extension() == ".trace");
  const traces::Trace t = traces::load_trace(files[0].string());
  REQUIRE(t.ranks.size() == 1);
  CHECK(t.ranks[0].rank == 0);
  CHECK(t.meta.tool_versions.at("pid") == files[0].stem().string());
}

TEST_CASE("kernel names: only Itanium-mangled names are demangled", "[profiler][cupti]") {
  using profiler::detail::demangle_kernel_name;
  CHECK(demangle_kernel_name("_Z6kernelPfi") == "kernel(float*, int)");
  CHECK(demangle_kernel_name("_ZN10shardscope3addEv") == "shardscope::add()");
  // extern "C" kernels: __cxa_demangle would turn these into type names.
  CHECK(demangle_kernel_name("f") == "f");
  CHECK(demangle_kernel_name("i") == "i");
  CHECK(demangle_kernel_name("Ss") == "Ss");
  CHECK(demangle_kernel_name("ncclDevKernel_AllGather_RING_LL") ==
        "ncclDevKernel_AllGather_RING_LL");
  CHECK(demangle_kernel_name("_Znot a name") == "_Znot a name");  // invalid: kept as is
  CHECK(demangle_kernel_name("_") == "_");
  CHECK(demangle_kernel_name(nullptr).empty());
}

TEST_CASE("injection library exports the driver's and NVTX's entry points", "[profiler][inject]") {
  void* lib = dlopen(SHARDSCOPE_INJECT_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(lib != nullptr);
  for (const char* name : {"InitializeInjection", "InitializeInjectionNvtx",
                           "InitializeInjectionNvtx2", "InitializeInjectionNvtxExtension"}) {
    INFO(name);
    CHECK(dlsym(lib, name) != nullptr);
  }
  // Everything else stays local (inject.map): shardscope's own code does not
  // clash with the program's symbols.
  CHECK(dlsym(lib, "_ZN10shardscope8profiler13CuptiRecorder5startERKNS0_11CuptiConfigE") ==
        nullptr);
  dlclose(lib);
}
