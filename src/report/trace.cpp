#include "report/trace.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>

#include "report/load_view.hpp"

namespace latprof {

namespace {

constexpr int kRequestPid = 1, kGpuPid = 2, kRequestsPid = 3;
constexpr int kRequestTid = 1;

struct Span {
  std::string name, cat;
  int64_t start_ns = 0, end_ns = 0;  // rounded once, so nesting survives the rounding
  nlohmann::json args = nlohmann::json::object();
};

int64_t to_ns(double us) {
  return std::isfinite(us) ? int64_t(std::llround(us * 1e3)) : 0;
}

nlohmann::json complete(const Span& s, int pid, int tid) {
  return {{"name", s.name},
          {"cat", s.cat},
          {"ph", "X"},
          {"pid", pid},
          {"tid", tid},
          {"ts", double(s.start_ns) / 1e3},
          {"dur", double(s.end_ns - s.start_ns) / 1e3},
          {"args", s.args}};
}

nlohmann::json meta(const char* what, int pid, int tid, const nlohmann::json& args) {
  nlohmann::json j = {{"name", what}, {"ph", "M"}, {"pid", pid}, {"args", args}};
  if (tid >= 0) j["tid"] = tid;
  return j;
}

// The request timeline: stages, decode steps, layers and ops.
std::vector<Span> request_spans(const RunReport& r) {
  std::set<std::string> op_names;
  for (int i = 0; i < kNumOps; ++i) op_names.insert(op_name(static_cast<Op>(i)));
  std::vector<Span> out;
  // Layers: (stage, step, layer) -> [first op start, last op end].
  std::map<std::tuple<std::string, int, int>, Span> layers;
  int64_t decode_a = INT64_MAX, decode_b = INT64_MIN;
  for (const TraceEvent& e : r.timeline) {
    Span s;
    s.name = e.name;
    s.start_ns = to_ns(e.start_us);
    s.end_ns = s.start_ns + std::max<int64_t>(0, to_ns(e.start_us + e.dur_us) - s.start_ns);
    const bool is_op = !e.stage.empty() && op_names.count(e.name);
    if (is_op) {
      s.cat = "op";
      s.args = {{"stage", e.stage}};
      if (e.layer >= 0) s.args["layer"] = e.layer;
      if (e.step >= 0) s.args["step"] = e.step;
      if (e.layer >= 0) {
        auto [it, fresh] = layers.try_emplace({e.stage, e.step, e.layer});
        Span& l = it->second;
        if (fresh) {
          l.name = "layer " + std::to_string(e.layer);
          l.cat = "layer";
          l.start_ns = s.start_ns;
          l.end_ns = s.end_ns;
          l.args = {{"stage", e.stage}, {"layer", e.layer}};
          if (e.step >= 0) l.args["step"] = e.step;
        }
        l.start_ns = std::min(l.start_ns, s.start_ns);
        l.end_ns = std::max(l.end_ns, s.end_ns);
      }
    } else if (e.name == "decode_step" || (e.stage.empty() && e.step > 0)) {
      // A decode step's forward pass, or the sampling that follows it.
      s.cat = "step";
      if (e.step >= 0) s.args["step"] = e.step;
      if (e.name == "decode_step") s.name = "decode_step " + std::to_string(e.step);
      decode_a = std::min(decode_a, s.start_ns);
      decode_b = std::max(decode_b, s.end_ns);
    } else {
      s.cat = "stage";
      if (e.step >= 0) s.args["step"] = e.step;
    }
    out.push_back(s);
  }
  for (auto& [key, l] : layers) {
    l.args["derived"] = "from the layer's first op start to its last op end";
    out.push_back(l);
  }
  if (decode_a < decode_b) {
    Span d;
    d.name = "decode";
    d.cat = "stage";
    d.start_ns = decode_a;
    d.end_ns = decode_b;
    d.args = {{"derived", "from the first decode step's start to the last step's end"}};
    out.push_back(d);
  }
  // Parents before children: by start, then longest first.
  std::stable_sort(out.begin(), out.end(), [](const Span& a, const Span& b) {
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    return a.end_ns - a.start_ns > b.end_ns - b.start_ns;
  });
  return out;
}

// The arrays of GPU records in the profile: "kernels" and "copies", at the top or one level down.
void gpu_arrays(const nlohmann::json& p,
                std::vector<std::pair<std::string, const nlohmann::json*>>& out, int depth) {
  if (!p.is_object()) return;
  for (const char* k : {"kernels", "copies"})
    if (p.contains(k) && p[k].is_array()) out.emplace_back(k, &p[k]);
  if (depth == 0)
    for (const auto& [k, v] : p.items()) gpu_arrays(v, out, 1);
}

nlohmann::json num(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json();
}

nlohmann::json counter(const char* name, int pid, int64_t ns, const nlohmann::json& args) {
  return {{"name", name}, {"ph", "C"}, {"pid", pid}, {"ts", double(ns) / 1e3}, {"args", args}};
}

// Load mode: the engine's counters over time, sampled at each step. Running sequences and the
// step's tokens hold from the step's start; they drop to 0 at its end when no step follows at
// once (the engine idles). KV usage is the fraction after the step, at its end.
void step_counters(const RunReport& r, int pid, nlohmann::json& ev) {
  for (size_t i = 0; i < r.steps.size(); ++i) {
    const StepRow& st = r.steps[i];
    const int64_t a = to_ns(st.start_ms * 1e3);
    const int64_t b = std::max(a, to_ns((st.start_ms + st.time_ms) * 1e3));
    ev.push_back(counter("running sequences", pid, a, {{"seqs", st.seqs}}));
    ev.push_back(counter("step tokens", pid, a,
                         {{"prefill", st.prefill_tokens}, {"decode", st.decode_tokens}}));
    ev.push_back(counter("KV usage", pid, b, {{"kv_usage", st.kv_usage}}));
    const bool idle_after = i + 1 == r.steps.size() || to_ns(r.steps[i + 1].start_ms * 1e3) > b;
    if (idle_after) {
      ev.push_back(counter("running sequences", pid, b, {{"seqs", 0}}));
      ev.push_back(counter("step tokens", pid, b, {{"prefill", 0}, {"decode", 0}}));
    }
  }
}

// Load mode: one thread per request on process kRequestsPid. The request's span (arrival to its
// last token, with its figures in args) holds three phases that partition it: queued [arrival,
// arrival + queue], prefill [arrival + queue, arrival + ttft], decode [arrival + ttft, arrival +
// e2e]; with no queue time known, "queued + prefill" [arrival, arrival + ttft]. Each token is an
// instant event at arrival + ttft + the sum of the gaps before it.
void request_tracks(const RunReport& r, nlohmann::json& ev) {
  const std::vector<RequestView> reqs = request_views(r);
  if (reqs.empty()) return;
  ev.push_back(meta(
      "process_name", kRequestsPid, -1,
      {{"name", "requests: " + std::to_string(reqs.size()) + " (time 0 = the first arrival)"}}));
  ev.push_back(meta("process_sort_index", kRequestsPid, -1, {{"sort_index", 1}}));
  for (const RequestView& q : reqs) {
    if (!std::isfinite(q.arrival_ms) || !std::isfinite(q.ttft_ms) || !std::isfinite(q.e2e_ms))
      continue;
    const int tid = int(q.id) + 1;
    ev.push_back(
        meta("thread_name", kRequestsPid, tid, {{"name", "request " + std::to_string(q.id)}}));
    ev.push_back(meta("thread_sort_index", kRequestsPid, tid, {{"sort_index", q.id}}));
    // Phase boundaries, rounded once and kept in order so the phases tile the request.
    const int64_t a = to_ns(q.arrival_ms * 1e3);
    const int64_t e = std::max(a, to_ns((q.arrival_ms + q.e2e_ms) * 1e3));
    const int64_t t = std::clamp(to_ns((q.arrival_ms + q.ttft_ms) * 1e3), a, e);
    const bool queued = std::isfinite(q.queue_ms);
    const int64_t w = queued ? std::clamp(to_ns((q.arrival_ms + q.queue_ms) * 1e3), a, t) : a;
    Span whole{"request " + std::to_string(q.id), "request", a, e};
    whole.args = {{"id", q.id},
                  {"input_tokens", q.input_tokens},
                  {"output_tokens", q.output_tokens},
                  {"arrival_ms", num(q.arrival_ms)},
                  {"queue_ms", num(q.queue_ms)},
                  {"ttft_ms", num(q.ttft_ms)},
                  {"tpot_ms", num(q.tpot_ms)},
                  {"e2e_ms", num(q.e2e_ms)},
                  {"preemptions", q.preemptions},
                  {"prefix_hit_tokens", q.prefix_hit_tokens},
                  {"slo_met", q.slo_met ? nlohmann::json(*q.slo_met) : nlohmann::json()},
                  {"class_compute_ms", num(q.compute_ms)},
                  {"class_memory_ms", num(q.memory_ms)},
                  {"class_communication_ms", num(q.communication_ms)},
                  {"class_scheduling_ms", num(q.scheduling_ms)}};
    ev.push_back(complete(whole, kRequestsPid, tid));
    const nlohmann::json id = {{"id", q.id}};
    if (queued) ev.push_back(complete({"queued", "queue", a, w, id}, kRequestsPid, tid));
    ev.push_back(complete({queued ? "prefill" : "queued + prefill", "prefill", w, t, id},
                          kRequestsPid, tid));
    ev.push_back(complete({"decode", "decode", t, e, id}, kRequestsPid, tid));
    double tok_ms = q.arrival_ms + q.ttft_ms;
    for (size_t k = 0; k <= q.itl_ms.size(); ++k) {
      if (k) tok_ms += q.itl_ms[k - 1];
      ev.push_back({{"name", "token " + std::to_string(k)},
                    {"cat", "token"},
                    {"ph", "i"},
                    {"s", "t"},
                    {"pid", kRequestsPid},
                    {"tid", tid},
                    {"ts", double(to_ns(tok_ms * 1e3)) / 1e3},
                    {"args",
                     {{"id", q.id},
                      {"token", k},
                      {"gap_ms", k ? num(q.itl_ms[k - 1]) : nlohmann::json()}}}});
    }
  }
}

}  // namespace

nlohmann::json trace_json(const RunReport& r) {
  nlohmann::json ev = nlohmann::json::array();
  const std::string what =
      r.run.model + " " + r.run.dtype + " on " + r.run.backend + " (" + r.run.device + ")";
  const bool load = is_load_report(r);
  ev.push_back(
      meta("process_name", kRequestPid, -1,
           {{"name", load ? "engine: " + what + ", run --requests (time 0 = the first arrival)"
                          : "request: " + what + ", median repeat"}}));
  ev.push_back(meta("process_sort_index", kRequestPid, -1, {{"sort_index", 0}}));
  if (!load) {
    ev.push_back(meta("thread_name", kRequestPid, kRequestTid,
                      {{"name", "stages > decode steps > layers > ops"}}));
    for (const Span& s : request_spans(r)) ev.push_back(complete(s, kRequestPid, kRequestTid));
  }
  // The engine's steps on a track of their own: what each step held and cost.
  if (!r.steps.empty()) {
    const int steps_tid = load ? kRequestTid : kRequestTid + 1;
    ev.push_back(meta("thread_name", kRequestPid, steps_tid,
                      {{"name", "engine steps (prefill + decode tokens)"}}));
    for (const StepRow& st : r.steps) {
      Span s;
      s.name = "step " + std::to_string(st.index) + ": " + std::to_string(st.prefill_tokens) +
               "p + " + std::to_string(st.decode_tokens) + "d";
      s.cat = "engine_step";
      s.start_ns = to_ns(st.start_ms * 1e3);
      s.end_ns = std::max(s.start_ns, to_ns((st.start_ms + st.time_ms) * 1e3));
      s.args = {{"prefill_tokens", st.prefill_tokens},
                {"decode_tokens", st.decode_tokens},
                {"seqs", st.seqs},
                {"kv_usage", st.kv_usage},
                {"preempted", st.preempted},
                {"schedule_ms", st.schedule_ms},
                {"forward_ms", st.forward_ms},
                {"sample_ms", st.sample_ms},
                {"mfu", st.mfu},
                {"mbu", st.mbu}};
      if (st.sync_ms >= 0) s.args["sync_ms"] = st.sync_ms;
      if (st.offcpu_ms >= 0) {  // the time the machine took from the step's threads
        s.args["offcpu_ms"] = st.offcpu_ms;
        s.args["runq_ms"] = st.runq_ms;
      }
      ev.push_back(complete(s, kRequestPid, steps_tid));
    }
    if (load) step_counters(r, kRequestPid, ev);
  }
  if (load) request_tracks(r, ev);

  std::vector<std::pair<std::string, const nlohmann::json*>> arrays;
  gpu_arrays(r.profile, arrays, 0);
  if (!arrays.empty()) {
    ev.push_back(meta("process_name", kGpuPid, -1,
                      {{"name", "GPU: " + r.run.device +
                                    " (CUPTI, separate profiling request; time 0 = its first "
                                    "record)"}}));
    ev.push_back(meta("process_sort_index", kGpuPid, -1, {{"sort_index", 1}}));
    std::map<std::string, int> tids;  // track name -> tid
    for (const auto& [kind, arr] : arrays) {
      for (const auto& k : *arr) {
        if (!k.is_object() || !k.contains("start_ns") || !k.contains("end_ns") ||
            !k["start_ns"].is_number() || !k["end_ns"].is_number())
          continue;
        std::string track = kind;
        if (k.contains("stream") && k["stream"].is_number_integer())
          track += " (stream " + std::to_string(k["stream"].get<int64_t>()) + ")";
        auto [it, fresh] = tids.try_emplace(track, int(tids.size()) + 1);
        if (fresh) ev.push_back(meta("thread_name", kGpuPid, it->second, {{"name", track}}));
        Span s;
        s.name = k.value("name", kind == "kernels" ? "kernel" : "copy");
        s.cat = kind == "kernels" ? "gpu_kernel" : "gpu_copy";
        s.start_ns = int64_t(k["start_ns"].get<double>());
        s.end_ns = std::max(s.start_ns, int64_t(k["end_ns"].get<double>()));
        for (const auto& [f, v] : k.items())
          if (f != "name" && f != "start_ns" && f != "end_ns") s.args[f] = v;
        ev.push_back(complete(s, kGpuPid, it->second));
      }
    }
  }
  nlohmann::json other = {
      {"tool", "latprof"}, {"schema_version", kSchemaVersion}, {"created_utc", r.created_utc}};
  other.update(run_identity_json(r));
  if (r.tool.is_object() && r.tool.contains("git_commit"))
    other["git_commit"] = r.tool["git_commit"];
  if (std::isfinite(r.metrics.e2e_ms)) other["e2e_ms"] = r.metrics.e2e_ms;
  if (load) other["load"] = r.load;
  return {{"traceEvents", ev}, {"displayTimeUnit", "ms"}, {"otherData", other}};
}

}  // namespace latprof
