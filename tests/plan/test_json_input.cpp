// plan/json_input.h: the one reader of untrusted JSON documents.
#include <catch2/catch.hpp>

#include <fstream>
#include <string>

#include "plan/error.h"
#include "plan/json_input.h"
#include "tests/temp_dir.h"

using namespace shardscope;
using nlohmann::json;

TEST_CASE("JSON input: nesting is limited, and deep input fails fast", "[json]") {
  const auto nested = [](int depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  // kMaxJsonDepth levels parse (depth counted from 0 at the top value).
  CHECK(plan::parse_json_input(nested(plan::kMaxJsonDepth), "x").is_array());
  CHECK_THROWS_WITH(plan::parse_json_input(nested(plan::kMaxJsonDepth + 1), "--policy p.json"),
                    Catch::Contains("--policy p.json: nested deeper than 128 levels"));
  // 100k levels (a stack overflow in the JSON library's copy before): an error.
  CHECK_THROWS_AS(plan::parse_json_input(nested(100000), "x"), plan::Error);
  std::string objects;
  for (int i = 0; i < 200; ++i) objects += R"({"a":)";
  objects += "1" + std::string(200, '}');
  CHECK_THROWS_WITH(plan::parse_json_input(objects, "x"),
                    Catch::Contains("nested deeper than 128 levels at '/a/a/a"));
}

TEST_CASE("JSON input: duplicate keys are refused, naming the key and the object", "[json]") {
  CHECK_THROWS_WITH(plan::parse_json_input(R"({"batch_size": 2, "batch_size": 3})", "--policy"),
                    Catch::Contains("duplicate key 'batch_size' in the object at the top level"));
  CHECK_THROWS_WITH(
      plan::parse_json_input(R"({"wrap": {"type": "class", "type": "size"}})", "--policy"),
      Catch::Contains("duplicate key 'type' in the object at '/wrap'"));
  // Equal keys in different objects are fine.
  const json ok = plan::parse_json_input(R"({"a": {"k": 1}, "b": {"k": 2}, "k": [{"k": 3}]})", "x");
  CHECK(ok["b"]["k"] == 2);
  CHECK(ok["k"][0]["k"] == 3);
}

TEST_CASE("JSON input: bare strings, syntax errors and quoting", "[json]") {
  CHECK_FALSE(plan::try_parse_json_input("class", "--set wrap.type").has_value());
  CHECK(*plan::try_parse_json_input("[1, 2]", "--set x") == json({1, 2}));
  CHECK_THROWS_WITH(plan::try_parse_json_input(std::string(300, '[') + std::string(300, ']'), "x"),
                    Catch::Contains("nested deeper"));
  CHECK_THROWS_WITH(plan::parse_json_input("{\"a\": }", "--grid g.json"),
                    Catch::Contains("--grid g.json: not valid JSON"));
  // A message quotes at most 200 characters of the input.
  const std::string long_key(50000, 'k');
  try {
    plan::parse_json_input("{\"" + long_key + "\": 1, \"" + long_key + "\": 2}", "x");
    FAIL("no error");
  } catch (const plan::Error& e) {
    const std::string m = e.what();
    CHECK(m.size() < 600);
    CHECK_THAT(m, Catch::Contains("... (50000 bytes)"));
  }
  CHECK(plan::quote_input("short") == "short");
}

TEST_CASE("JSON input files: a directory, a missing file, a good file", "[json]") {
  test::TempDir dir;
  CHECK_THROWS_WITH(plan::load_json_input(dir.path.string(), "--policy"),
                    Catch::Contains("--policy: '" + dir.path.string() + "' is a directory"));
  CHECK_THROWS_WITH(
      plan::load_json_input((dir.path / "none.json").string(), "--hw"),
      Catch::Contains("--hw: cannot open") && Catch::Contains("No such file or directory"));
  const std::string good = (dir.path / "p.json").string();
  std::ofstream(good) << R"({"batch_size": 4})";
  CHECK(plan::load_json_input(good, "--policy")["batch_size"] == 4);
  std::ofstream(good) << R"({"batch_size": 4, "batch_size": 5})";
  CHECK_THROWS_WITH(plan::load_json_input(good, "--policy"),
                    Catch::Contains("--policy '" + good + "': duplicate key 'batch_size'"));
}

TEST_CASE("JSON input: a number overflow names the key and quotes 200 characters", "[json]") {
  const std::string digits(100000, '9');
  try {
    plan::parse_json_input(R"({"optimizer": {"lr": )" + digits + "}}", "--policy p.json");
    FAIL("no error");
  } catch (const plan::Error& e) {
    const std::string m = e.what();
    CHECK_THAT(m, Catch::Contains("--policy p.json: the number at '/optimizer/lr' is too large "
                                  "for a double"));
    CHECK(m.size() < 600);
  }
  CHECK_THROWS_WITH(plan::parse_json_input(R"({"wrap": {"type": ]}})", "--policy p.json"),
                    Catch::Contains("not valid JSON (in '/wrap/type')"));
}
