// The recipe language: placement, dtype, quant rules and hooks, parallel, verify and trace;
// require (qload's library and the recipe's own folder, nothing else); how a recipe becomes
// load options. The basics (source, devices, io, key checks) are in recipe_test.cpp.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "qload/scripts/recipe.hpp"
#include "support/scratch.hpp"

using namespace qload;
using scheduler::WeightPolicy;
using Action = WeightPolicy::Action;

namespace {

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// The policy the recipe gives `name`, or FAIL.
std::optional<WeightPolicy> policy(const scripts::Recipe& r, std::string_view name) {
  auto p = r.weight_policy(name);
  if (!p) FAIL(p.error().to_string());
  return *p;
}

}  // namespace

TEST_CASE("a recipe's devices, dtype, rules, parallel, verify, trace and report are read", "[scripts][recipe]") {
  const std::string text = R"(
    return qload.recipe {
      source    = "m",
      devices   = { "cpu", "cpu:1" },
      dtype     = "f16",
      quant     = {
        { match = "lm_head.*", skip = true },
        { match = "*.mlp.*", dequantize = "bf16" },
        { pattern = "self_attn%.[qk]_proj", quantize = "fp8:block" },
        { match = "*.self_attn.*", repack = true },
        { match = "*", keep = true },
      },
      parallel  = { pipeline = 2 },
      verify    = "qload.lock",
      trace     = "traces/t.json",
      report    = "json",
    })";
  auto r = scripts::parse_recipe(text, "/work/r/recipe.lua");
  if (!r) FAIL(r.error().to_string());
  CHECK(r->devices == std::vector<std::string>{"cpu", "cpu:1"});
  CHECK(r->dtype == DType::kF16);
  REQUIRE(r->quant.size() == 5);
  CHECK(r->quant[1].glob == "*.mlp.*");
  CHECK(r->quant[1].line == 8);  // the text starts with a newline
  CHECK(r->quant[2].pattern == "self_attn%.[qk]_proj");
  CHECK(r->parallel.pipeline == 2);
  CHECK(r->verify == "/work/r/qload.lock");
  CHECK(r->trace == "/work/r/traces/t.json");
  CHECK(r->json_report);

  // First match wins; a glob's * crosses dots; a pattern is found anywhere in the name.
  CHECK(policy(*r, "lm_head.weight")->action == Action::kKeep);
  const auto mlp = policy(*r, "model.layers.0.mlp.up_proj.weight");
  CHECK(mlp->action == Action::kDequantize);
  CHECK(mlp->dtype == DType::kBF16);
  const auto q = policy(*r, "model.layers.3.self_attn.q_proj.weight");
  CHECK(q->action == Action::kQuantize);
  CHECK(q->target == formats::QuantizeTarget::kFp8Block);
  CHECK(policy(*r, "model.layers.3.self_attn.o_proj.weight")->action == Action::kRepack);
  CHECK(policy(*r, "model.norm.weight")->action == Action::kKeep);

  scheduler::LoadOptions o;
  REQUIRE(r->apply(o));
  CHECK(o.plan.devices.size() == 2);
  CHECK(o.plan.parallel.pipeline == 2);
  CHECK(o.plan.dtype == DType::kF16);
  REQUIRE(o.plan.weight_policy);
  CHECK(o.plan.weight_policy("model.layers.0.mlp.up_proj.weight").value()->action == Action::kDequantize);
  CHECK_FALSE(o.plan.place);
}

TEST_CASE("a recipe without rules matches nothing; a rule list may be empty", "[scripts][recipe]") {
  auto r = scripts::parse_recipe("return qload.recipe { source = 'm', quant = {} }", "r.lua");
  REQUIRE(r);
  CHECK_FALSE(policy(*r, "a.weight").has_value());
  scheduler::LoadOptions o;
  REQUIRE(r->apply(o));
  CHECK_FALSE(o.plan.weight_policy);
}

TEST_CASE("placement and quant functions run at plan time, in the sandbox", "[scripts][recipe]") {
  const std::string text = R"(
    local function layer(name) return tonumber(name:match("layers%.(%d+)%.")) end
    local function refuse(name) error("no rule for " .. name) end
    return qload.recipe {
      source    = "m",
      devices   = { "cpu", "cpu:1" },
      placement = function(name)
        local l = layer(name)
        if l == nil then return nil end
        return l < 2 and "cpu" or "cpu:1"
      end,
      quant     = function(name)
        if name:find("mlp") then return { quantize = "int8" } end
        if name:find("boom") then refuse(name) end
        if name:find("odd") then return 42 end
        return nil
      end,
    })";
  auto r = scripts::parse_recipe(text, "/r/hooks.lua");
  if (!r) FAIL(r.error().to_string());
  CHECK(r->has_place_hook());
  CHECK(r->place("model.layers.0.mlp.up_proj.weight").value() == 0u);
  CHECK(r->place("model.layers.3.mlp.up_proj.weight").value() == 1u);
  CHECK_FALSE(r->place("model.norm.weight").value().has_value());
  CHECK(policy(*r, "model.layers.0.mlp.up_proj.weight")->target == formats::QuantizeTarget::kInt8Row);
  CHECK_FALSE(policy(*r, "model.layers.0.self_attn.q_proj.weight").has_value());

  auto boom = r->weight_policy("boom.weight");
  REQUIRE_FALSE(boom);
  CHECK(boom.error().file() == "/r/hooks.lua");
  // The message names the line that raised it; the note, the line that called it.
  CHECK_THAT(boom.error().to_string(), Catch::Contains("hooks.lua:3: no rule for boom.weight"));
  CHECK_THAT(boom.error().to_string(), Catch::Contains("traceback: /r/hooks.lua:3"));
  CHECK_THAT(boom.error().to_string(), Catch::Contains("<- /r/hooks.lua:14"));
  auto odd = r->weight_policy("odd.weight");
  REQUIRE_FALSE(odd);
  CHECK_THAT(odd.error().to_string(), Catch::Contains("must be a table"));

  scheduler::LoadOptions o;
  REQUIRE(r->apply(o));
  REQUIRE(o.plan.place);
  CHECK(o.plan.place("model.layers.5.x").value() == 1u);
}

TEST_CASE("a hook that returns a device the recipe does not list, or loops forever, fails", "[scripts][recipe]") {
  scripts::SandboxLimits limits;
  limits.max_instructions = 1'000'000;
  auto r = scripts::parse_recipe(R"(
    return qload.recipe {
      source = "m",
      placement = function(name) if name == "spin" then while true do end end return "cuda:7" end,
    })",
                                 "r.lua", limits);
  REQUIRE(r);
  auto wrong = r->place("x");
  REQUIRE_FALSE(wrong);
  CHECK_THAT(wrong.error().to_string(), Catch::Contains("not one of the recipe's devices (cpu)"));
  auto spin = r->place("spin");
  REQUIRE_FALSE(spin);
  CHECK_THAT(spin.error().to_string(), Catch::Contains("exceeded its budget"));
}

TEST_CASE("a rule with both dequantize and quantize requantizes", "[scripts][recipe]") {
  auto r = scripts::parse_recipe(R"(
    return qload.recipe {
      source = "m",
      quant = {
        { match = "*.mlp.*", dequantize = "f32", quantize = "fp8:block" },
        { match = "*", dequantize = "bf16", quantize = "int8", keep = true },
      },
    })",
                                 "r.lua");
  REQUIRE_FALSE(r);  // keep with the pair is two actions
  CHECK_THAT(r.error().to_string(), Catch::Contains("quant[2] needs exactly one action"));
  r = scripts::parse_recipe(R"(
    return qload.recipe { source = "m", quant = { { match = "*.mlp.*", dequantize = "f32", quantize = "fp8:block" } } })",
                            "r.lua");
  REQUIRE(r);
  const auto up = policy(*r, "model.layers.0.mlp.up_proj.weight");
  CHECK(up->action == Action::kRequantize);
  CHECK(up->dtype == DType::kF32);
  CHECK(up->target == formats::QuantizeTarget::kFp8Block);
}

TEST_CASE("recipe language mistakes name the file and line", "[scripts][recipe]") {
  struct Case {
    const char* text;
    const char* expect;
  };
  const Case cases[] = {
      {"return qload.recipe { source = 'm',\n quant = { { match = '*' } } }",
       "r.lua:2: quant[1] needs exactly one action"},
      {"return qload.recipe { source = 'm',\n quant = {\n { match = '*.mlp.*', keep = true, repack = true } } }",
       "r.lua:3: quant[1] needs exactly one action"},
      {"return qload.recipe { source = 'm', quant = { { match = 'x', dequantize = 'int4' } } }",
       "dequantize = 'int4' is not bf16, f16 or f32"},
      {"return qload.recipe { source = 'm', quant = { { match = 'x', quantize = 'fp4' } } }", "quant[1]: "},
      {"return qload.recipe { source = 'm', quant = { { match = 'x', pattern = 'y', keep = true } } }",
       "quant[1] needs exactly one of 'match' (a glob) and 'pattern'"},
      {"return qload.recipe { source = 'm',\n quant = { { mtch = 'x', keep = true } } }",
       "r.lua:2: unknown key 'mtch' in quant[1] (did you mean 'match'?)"},
      {"return qload.recipe { source = 'm', quant = { match = 'x' } }", "'quant' must be a list of rules"},
      {"return qload.recipe { source = 'm', quant = { 'x' } }", "quant[1] must be a table"},
      {"return qload.recipe { source = 'm', quant = { { match = 'x', keep = 'yes' } } }",
       "'keep' must be true or false"},
      {"return qload.recipe { source = 'm',\n\n dtype = 'int8' }", "r.lua:3: dtype 'int8' is not bf16, f16 or f32"},
      {"return qload.recipe { source = 'm', placement = 'random' }",
       "placement 'random' is not round-robin or by-layer"},
      {"return qload.recipe { source = 'm', placement = 3 }", "'placement' must be a string or a function"},
      {"return qload.recipe { source = 'm', parallel = { tensors = 2 } }",
       "unknown key 'tensors' in parallel (did you mean 'tensor'?)"},
      {"return qload.recipe { source = 'm', parallel = { pipeline = 0 } }", "parallel.pipeline must be a whole number"},
      {"return qload.recipe { source = 'm', devices = 'gpu0' }", "gpu0"},
      {"return qload.recipe { source = 'm', devices = { 'cpu', 'cpu' } }", "twice"},
      {"return qload.recipe { source = 'm', verify = true }", "'verify' must be a lockfile path"},
      {"return qload.recipe { source = 'm', report = 'xml' }", "report 'xml' is not \"text\" or \"json\""},
      {"return qload.recipe { source = '/nonexistent/*/model' }", "matches 0 paths"},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    auto r = scripts::parse_recipe(c.text, "r.lua");
    REQUIRE_FALSE(r);
    CHECK(r.error().file() == "r.lua");
    CHECK_THAT(r.error().to_string(), Catch::Contains(c.expect));
  }
}

TEST_CASE("a recipe's parallel layout and split rules become load options", "[scripts][recipe]") {
  auto r = scripts::parse_recipe(R"(
    return qload.recipe {
      source   = 'm',
      devices  = { 'cpu:0', 'cpu:1', 'cpu:2', 'cpu:3' },
      parallel = { tensor = 2, pipeline = 2, rules = {
        { match = "*.wo.weight", split = "cols" },
        { pattern = "%.w[13]%.", split = "rows" },
        { match = "*norm*", split = "replicate" },
      } },
    })",
                                 "r.lua");
  if (!r) FAIL(r.error().to_string());
  REQUIRE(r->split_rules.size() == 3);
  CHECK(r->split("layers.0.attention.wo.weight").value() == scheduler::Split::kCols);
  CHECK(r->split("layers.0.feed_forward.w1.weight").value() == scheduler::Split::kRows);
  CHECK_FALSE(r->split("layers.0.feed_forward.w2.weight").value().has_value());  // the llama default applies
  scheduler::LoadOptions o;
  REQUIRE(r->apply(o));
  CHECK(o.plan.parallel.tensor == 2);
  CHECK(o.plan.parallel.pipeline == 2);
  CHECK(o.plan.parallel.data == 1);
  REQUIRE(o.plan.split);
  CHECK(o.plan.split("x.wo.weight").value() == scheduler::Split::kCols);

  const std::pair<const char*, const char*> refused[] = {
      {"return qload.recipe { source = 'm', devices = { 'cpu', 'cpu:1' }, parallel = { pipeline = 3 } }",
       "needs 3 devices; the recipe lists 2"},
      {"return qload.recipe { source = 'm', devices = { 'cpu', 'cpu:1' }, placement = 'round-robin', parallel = { "
       "pipeline = 2 } }",
       "'placement' contradicts 'parallel'"},
      {"return qload.recipe { source = 'm', parallel = { rules = { { match = '*', split = 'rows' } } } }",
       "parallel.rules need parallel.tensor greater than 1"},
      {"return qload.recipe { source = 'm', parallel = { data = 2, share_reads = true } }",
       "parallel.share_reads needs a multi-process load"},
  };
  for (const auto& [text, expect] : refused) {
    INFO(text);
    auto bad = scripts::parse_recipe(text, "r.lua");
    REQUIRE(bad);
    scheduler::LoadOptions options;
    const Status s = bad->apply(options);
    REQUIRE_FALSE(s);
    CHECK(s.error().file() == "r.lua");
    CHECK_THAT(s.error().to_string(), Catch::Contains(expect));
  }
  const std::pair<const char*, const char*> malformed[] = {
      {"return qload.recipe { source = 'm', parallel = { tensor = 2, rules = { { match = '*', split = 'diagonal' } } } "
       "}",
       "parallel.rules[1]: split 'diagonal' is not replicate, rows, cols, heads, halves, experts, expert_rows, "
       "expert_halves or expert_cols"},
      {"return qload.recipe { source = 'm', parallel = { tensor = 2, rules = { { match = '*', splt = 'rows' } } } }",
       "unknown key 'splt' in parallel.rules[1] (did you mean 'split'?)"},
      {"return qload.recipe { source = 'm', parallel = { tensor = 2, rules = { { split = 'rows' } } } }",
       "needs exactly one of 'match'"},
      {"return qload.recipe { source = 'm', parallel = { data = 2, share_reads = 'yes' } }",
       "'share_reads' must be true or false, not a string"},
  };
  // One process of a multi-process load: the recipe's devices are its share of the layout's.
  auto per_node = scripts::parse_recipe(
      "return qload.recipe { source = 'm', devices = { 'cpu:0', 'cpu:1' }, parallel = { tensor = 2, data = 2, "
      "share_reads = true } }",
      "r.lua");
  REQUIRE(per_node);
  scheduler::LoadOptions mp;
  const distributed::World rank1{.rank = 1, .size = 2};
  REQUIRE(per_node->apply(mp, rank1));
  CHECK(mp.plan.parallel.processes == 2);
  CHECK(mp.plan.parallel.process == 1);
  CHECK(mp.plan.parallel.share_reads);
  scheduler::LoadOptions too_few;
  const Status s = per_node->apply(too_few, distributed::World{.rank = 0, .size = 3});
  REQUIRE_FALSE(s);
  CHECK_THAT(s.error().message(),
             Catch::Contains("needs 4 devices; 3 processes (WORLD_SIZE) with the recipe's 2 hold 6"));
  for (const auto& [text, expect] : malformed) {
    INFO(text);
    auto bad = scripts::parse_recipe(text, "r.lua");
    REQUIRE_FALSE(bad);
    CHECK_THAT(bad.error().to_string(), Catch::Contains(expect));
  }
}

TEST_CASE("require loads qload's library and modules from the recipe's folder only", "[scripts][recipe][sandbox]") {
  testing::ScratchDir dir;
  std::filesystem::create_directories(dir.path() / "helpers");
  write_text(dir.file("helpers/llama.lua"), "local M = {}\nM.mlp = '*.mlp.*'\nreturn M\n");
  write_text(dir.file("recipe.lua"), R"(
    local presets = require("qload.presets")
    local llama = require("helpers.llama")
    local rules = presets.llama_quantize("int8")
    table.insert(rules, 1, { match = llama.mlp, dequantize = "f32" })
    return qload.recipe { source = "m", quant = rules, io = { chunk = qload.size("4MiB") } }
  )");
  auto r = scripts::load_recipe(dir.file("recipe.lua"));
  if (!r) FAIL(r.error().to_string());
  ResolvedSettings settings;
  REQUIRE(r->apply_settings(settings));
  CHECK(settings.values().slot_bytes == (4u << 20));
  CHECK(r->modules.size() == 1);
  CHECK(policy(*r, "model.layers.0.mlp.up_proj.weight")->action == Action::kDequantize);
  CHECK(policy(*r, "model.layers.0.self_attn.q_proj.weight")->target == formats::QuantizeTarget::kInt8Row);
  CHECK(policy(*r, "lm_head.weight")->action == Action::kKeep);
  CHECK_FALSE(policy(*r, "model.norm.weight").has_value());

  SECTION("the recipe hash covers the helper modules") {
    const std::uint64_t before = r->hash;
    write_text(dir.file("helpers/llama.lua"), "local M = {}\nM.mlp = '*.mlp.*' -- edited\nreturn M\n");
    auto again = scripts::load_recipe(dir.file("recipe.lua"));
    REQUIRE(again);
    CHECK(again->hash != before);
  }
  SECTION("escapes and mistakes are refused") {
    std::filesystem::create_symlink("/etc", dir.path() / "outside");
    write_text(dir.file("cycle.lua"), "return require('cycle')");
    const std::pair<const char*, const char*> cases[] = {
        {"require('/etc/passwd')", "is not a module name"},
        {"require('..passwd')", "is not a module name"},
        {"require('helpers.')", "is not a module name"},
        {"require('helpers..llama')", "is not a module name"},
        {"require('9lives')", "is not a module name"},
        {"require('helpers.9')", "is not a module name"},
        {"require('help-ers')", "is not a module name"},
        {"require('')", "is not a module name"},
        {"require('outside.passwd')", "resolves outside the recipe's folder"},
        {"require('missing')", "no module 'missing'"},
        {"require('qload.nothing')", "qload's library has no module 'qload.nothing'"},
        {"require('cycle')", "requires itself"},
    };
    for (const auto& [code, expect] : cases) {
      INFO(code);
      write_text(dir.file("bad.lua"), std::string(code) + "\nreturn qload.recipe { source = 'm' }");
      auto bad = scripts::load_recipe(dir.file("bad.lua"));
      REQUIRE_FALSE(bad);
      CHECK_THAT(bad.error().to_string(), Catch::Contains(expect));
    }
  }
  SECTION("a plan-time hook cannot require") {
    write_text(dir.file("late.lua"),
               "return qload.recipe { source = 'm', quant = function(n) return require('helpers.llama') end }");
    auto late = scripts::load_recipe(dir.file("late.lua"));
    REQUIRE(late);
    auto p = late->weight_policy("x.weight");
    REQUIRE_FALSE(p);
    CHECK_THAT(p.error().to_string(), Catch::Contains("only available while the recipe itself runs"));
  }
}

TEST_CASE("recipes cannot reach outside the sandbox", "[scripts][recipe][sandbox]") {
  scripts::SandboxLimits limits;
  limits.max_instructions = 2'000'000;
  limits.max_memory_bytes = 32 << 20;
  const std::pair<const char*, const char*> cases[] = {
      {"os.execute('true')", "attempt to index global 'os'"},
      {"io.open('/etc/passwd')", "attempt to index global 'io'"},
      {"loadstring('return 1')", "attempt to call global 'loadstring'"},
      {"load('return 1')", "attempt to call global 'load'"},
      {"dofile('/etc/passwd')", "attempt to call global 'dofile'"},
      {"string.dump(print)", "attempt to call field 'dump'"},
      {"debug.getinfo(1)", "attempt to index global 'debug'"},
      {"package.loadlib('x', 'y')", "attempt to index global 'package'"},
      {"require('ffi')", "no module 'ffi'"},
      {"while true do end", "exceeded its budget"},
      {"local t = {} for i = 1, 1e9 do t[i] = string.rep('x', 1024) .. i end", "not enough memory"},
  };
  for (const auto& [code, expect] : cases) {
    INFO(code);
    auto r = scripts::parse_recipe(std::string(code) + "\nreturn qload.recipe { source = 'm' }", "/tmp/r.lua", limits);
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().to_string(), Catch::Contains(expect));
  }
}
