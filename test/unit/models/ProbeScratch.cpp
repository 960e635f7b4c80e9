#include "ModelsTestSupport.h"
#include <iostream>
using namespace csa; using namespace csa::test;
TEST(Probe, All) {
  ModelConfig c = releasedConfig();
  Schedule s = scheduleOf(c);
  auto st = applyScheduleOverrides(c, s, R"({"layers": {"25": {"kv_source": -5, "index_source": -7}}})", "o");
  std::cout << "neg explicit: " << st << " kv=" << s.layers[25].kvSource << "\n";
  s = scheduleOf(c);
  st = applyScheduleOverrides(c, s, R"({"layers": {"25": {"kv_source": 21}}})", "o");
  std::cout << "after failed override: " << st << " layer 3 kv=" << s.layers[3].kvSource << " 25 kv=" << s.layers[25].kvSource << "\n";
  s = scheduleOf(c);
  st = applyScheduleOverrides(c, s, R"({"layers": {"29": {"index_source": 20}}})", "o");
  ModelConfig c2 = c; applyScheduleToConfig(s, c2);
  auto back = scheduleFromConfig(c2);
  std::cout << "roundtrip explicit: " << sameSchedule(*back, s) << "\n";
  std::cout << scheduleFromString(tinyConfig(), "WWF0.C.R.").status() << "\n";
  std::cout << scheduleFromString(tinyConfig(), "WW_F.C.R.").status() << "\n";
  auto hf = parseEditedHf([](json &j){ j["text_config"]["o_groups"] = 6; });
  std::cout << hf.status() << "\n";
  auto hf2 = parseEditedHf([](json &j){ j["text_config"]["compress_ratios"].push_back(0); });
  std::cout << hf2.status() << "\n";
  auto f = parseEditedFlat([](json &j){ j["index_source_layers"] = json::array({0,2,8,14,20,24,28,32,36}); });
  std::cout << scheduleFromConfig(*f).status() << "\n";
  auto f2 = parseEditedFlat([](json &j){ j["dim"] = 1e30; });
  std::cout << "dim 1e30: " << f2.status() << "\n";
  auto f3 = parseEditedFlat([](json &j){ j["dim"] = 18446744073709551615ull; });
  std::cout << "dim u64max: " << f3.status() << (f3.ok()? std::to_string(f3->dim):"") << "\n";
  auto f4 = parseEditedFlat([](json &j){ j["kv_source_layers"] = json::array({2,2,8,14,20}); });
  std::cout << "dup kv: " << f4.status() << " " << scheduleFromConfig(*f4).status() << "\n";
  auto f5 = parseEditedFlat([](json &j){ j["compress_ratios"][2] = 1; });
  std::cout << "ratio change: " << scheduleFromConfig(*f5).status() << "\n";
  auto t = parseModelConfig(R"({"text_config": 5})", "x");
  std::cout << t.status() << "\n";
  auto f6 = parseEditedFlat([](json &j){ j["candidate_source_layer"] = 20; j["candidate_topk_blocks"] = 0; j["compress_ratios"][2]=2; });
  std::cout << "cand blocks 0: " << f6.status() << "\n";
  auto f7 = parseEditedFlat([](json &j){ j.erase("candidate_source_layer"); j["candidate_topk_blocks"] = -3; });
  std::cout << "blocks -3 without source: " << f7.status() << "\n";
  auto v = loadVariant("tiny");
  Schedule ts = v->schedule;
  st = applyScheduleOverrides(v->config, ts, R"({"layers": {" 3": {"mode": "reuse"}, "+5": {"mode":"reuse"}}})", "o");
  std::cout << "spaced keys: " << st << "\n";
}
