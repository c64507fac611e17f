// io::AtomicFile: the one "temporary, then rename" of the tree, and its
// explicit durability (io/atomic_file.h). Whether commit() fsyncs is seen
// through the fault hook: an injected fsync failure fails a Durability::fsync
// commit and is never consulted by a rename_only one.
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>

#include "io/atomic_file.h"
#include "io/output_error.h"
#include "io/output_file.h"
#include "io/temp_registry.h"
#include "tests/temp_dir.h"

namespace fs = std::filesystem;
using namespace shardscope;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int temporaries_in(const fs::path& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir))
    n += e.path().filename().string().find(".tmp.") != std::string::npos;
  return n;
}

}  // namespace

TEST_CASE("atomic file: fsync durability fsyncs before the rename, rename_only never does",
          "[io]") {
  test::TempDir dir("atomic");
  const std::string path = (dir.path / "out.bin").string();
  { std::ofstream(path) << "old"; }
  io::WriteFaults faults;
  faults.fail_fsync = true;
  io::AtomicFileOptions options;
  options.faults = &faults;
  {
    io::AtomicFile f(path, io::Durability::fsync, options);
    f.write("new", 3);
    CHECK_THROWS_WITH(f.commit(), Catch::Contains("'" + path + "': fsync failed (injected)") &&
                                      Catch::Contains("Input/output error"));
    CHECK(f.temporary().empty());
  }
  CHECK(slurp(path) == "old");  // the failed fsync came before the rename
  CHECK(temporaries_in(dir.path) == 0);
  {
    io::AtomicFile f(path, io::Durability::rename_only, options);
    f.write("new", 3);
    f.commit();  // the fsync fault is not consulted: no fsync
  }
  CHECK(slurp(path) == "new");
  CHECK(temporaries_in(dir.path) == 0);
  faults.fail_fsync = false;
  {
    io::AtomicFile f(path, io::Durability::fsync, options);
    CHECK(f.durability() == io::Durability::fsync);
    f.write("durable", 7);
    f.commit();
  }
  CHECK(slurp(path) == "durable");
}

TEST_CASE("atomic file: failures keep the old file, remove the temporary and name the path",
          "[io]") {
  test::TempDir dir("atomic");
  const std::string path = (dir.path / "out.bin").string();
  { std::ofstream(path) << "old"; }
  io::WriteFaults faults;
  io::AtomicFileOptions options;
  options.faults = &faults;
  options.error_path = "shown.bin";
  faults.fail_after_bytes = 2;
  {
    io::AtomicFile f(path, io::Durability::fsync, options);
    CHECK(io::registered_temporaries() == 1);
    CHECK_THROWS_AS(f.write("abc", 3), io::OutputWriteError);
    CHECK(io::registered_temporaries() == 0);
    CHECK_THROWS_WITH(f.write("a", 1), "'shown.bin': write after the file was closed");
  }
  faults.fail_after_bytes = -1;
  faults.fail_rename = true;
  {
    io::AtomicFile f(path, io::Durability::rename_only, options);
    f.write("abc", 3);
    CHECK_THROWS_WITH(f.commit(), Catch::StartsWith("'shown.bin': cannot rename the temporary") &&
                                      Catch::Contains("Invalid cross-device link"));
  }
  CHECK(slurp(path) == "old");
  CHECK(temporaries_in(dir.path) == 0);
  CHECK_THROWS_AS(io::AtomicFile((dir.path / "missing" / "x").string(), io::Durability::fsync),
                  io::OutputTargetError);
}

TEST_CASE("atomic file: two writers of one path have their own temporaries, the last commit wins",
          "[io]") {
  test::TempDir dir("atomic");
  const std::string path = (dir.path / "out.bin").string();
  io::AtomicFile a(path, io::Durability::fsync);
  io::AtomicFile b(path, io::Durability::fsync);
  CHECK(a.temporary() != b.temporary());
  a.write("first", 5);
  b.write("second", 6);
  a.commit();
  CHECK(slurp(path) == "first");
  b.commit();
  CHECK(slurp(path) == "second");
  CHECK(b.bytes_written() == 6);
  CHECK(temporaries_in(dir.path) == 0);
}

TEST_CASE("atomic file: create_mode applies to a new file, set_mode to a replacing one", "[io]") {
  test::TempDir dir("atomic");
  const std::string path = (dir.path / "out.bin").string();
  const mode_t old_umask = ::umask(022);
  io::AtomicFileOptions options;
  options.create_mode = 0600;
  {
    io::AtomicFile f(path, io::Durability::rename_only, options);
    f.commit();
  }
  CHECK((fs::status(path).permissions() & fs::perms::all) ==
        (fs::perms::owner_read | fs::perms::owner_write));
  {
    io::AtomicFile f(path, io::Durability::rename_only, options);
    f.set_mode(0640);
    f.commit();
  }
  ::umask(old_umask);
  CHECK((fs::status(path).permissions() & fs::perms::all) ==
        (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read));
}

TEST_CASE("output file: fsync durability goes through to a regular file, a device is refused",
          "[io]") {
  test::TempDir dir("atomic");
  const std::string path = (dir.path / "out.json").string();
  io::OutputOptions durable;
  durable.durability = io::Durability::fsync;
  CHECK(io::OutputOptions{}.durability == io::Durability::rename_only);
  io::write_output_file(path, "{}\n", durable);
  CHECK(slurp(path) == "{}\n");
  CHECK_THROWS_WITH(io::OutputFile("/dev/null", durable),
                    "'/dev/null': is a device or FIFO: only a regular file can be written durably "
                    "(fsync)");
  io::OutputFile in_place("/dev/null");  // rename_only: written in place, as before
  in_place.write("x", 1);
  in_place.commit();
}
