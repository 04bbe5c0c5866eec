#include "report/schema_check.hpp"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <stdexcept>

#include "core/error.hpp"

namespace latprof {

namespace {

struct Validator {
  const nlohmann::json& root;
  size_t max_errors;
  std::vector<std::string> errors;

  void fail(const std::string& where, const std::string& what) {
    if (errors.size() < max_errors) errors.push_back((where.empty() ? "/" : where) + ": " + what);
  }

  static bool is_type(const nlohmann::json& v, const std::string& t) {
    if (t == "null") return v.is_null();
    if (t == "boolean") return v.is_boolean();
    if (t == "string") return v.is_string();
    if (t == "array") return v.is_array();
    if (t == "object") return v.is_object();
    if (t == "number") return v.is_number();
    if (t == "integer") {
      if (v.is_number_integer()) return true;
      if (!v.is_number_float()) return false;
      const double d = v.get<double>();
      return std::isfinite(d) && std::floor(d) == d;
    }
    throw std::invalid_argument("schema: unknown type '" + t + "'");
  }

  const nlohmann::json& resolve(const std::string& ref) {
    if (ref.rfind("#/", 0) != 0)
      throw std::invalid_argument("schema: only local $ref (#/...) is supported, got " + ref);
    return root.at(nlohmann::json::json_pointer(ref.substr(1)));
  }

  static std::string escape(const std::string& key) {
    std::string o;
    for (char c : key) o += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
    return o;
  }

  void check(const nlohmann::json& v, const nlohmann::json& s, const std::string& where) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail(where, "no value is allowed here");
      return;
    }
    if (!s.is_object()) throw std::invalid_argument("schema at " + where + " is not an object");
    for (const auto& [k, rule] : s.items()) {
      if (k == "$schema" || k == "$id" || k == "$comment" || k == "title" || k == "description" ||
          k == "$defs" || k == "default" || k == "examples" || k.rfind("x-", 0) == 0)
        continue;
      if (k == "$ref") {
        check(v, resolve(rule.get<std::string>()), where);
      } else if (k == "type") {
        bool ok = false;
        std::string names;
        for (const auto& t : rule.is_array() ? rule : nlohmann::json::array({rule})) {
          ok = ok || is_type(v, t.get<std::string>());
          names += (names.empty() ? "" : " or ") + t.get<std::string>();
        }
        if (!ok) fail(where, "is " + std::string(v.type_name()) + ", expected " + names);
      } else if (k == "required") {
        if (v.is_object())
          for (const auto& name : rule)
            if (!v.contains(name.get<std::string>()))
              fail(where, "missing required field '" + name.get<std::string>() + "'");
      } else if (k == "properties") {
        if (v.is_object())
          for (const auto& [name, sub] : rule.items())
            if (v.contains(name)) check(v[name], sub, where + "/" + escape(name));
      } else if (k == "additionalProperties") {
        if (!v.is_object()) continue;
        const nlohmann::json* props = s.contains("properties") ? &s["properties"] : nullptr;
        for (const auto& [name, sub] : v.items())
          if (!props || !props->contains(name)) check(sub, rule, where + "/" + escape(name));
      } else if (k == "items") {
        if (v.is_array())
          for (size_t i = 0; i < v.size(); ++i) check(v[i], rule, where + "/" + std::to_string(i));
      } else if (k == "enum") {
        bool ok = false;
        for (const auto& e : rule) ok = ok || e == v;
        if (!ok) fail(where, "is " + v.dump() + ", expected one of " + rule.dump());
      } else if (k == "const") {
        if (v != rule) fail(where, "is " + v.dump() + ", expected " + rule.dump());
      } else if (k == "oneOf" || k == "anyOf") {
        // How many alternatives the value satisfies, each checked on its own.
        size_t matched = 0;
        std::string why;
        for (const auto& alt : rule) {
          Validator sub{root, 1, {}};
          sub.check(v, alt, where);
          if (sub.errors.empty())
            ++matched;
          else if (why.empty())
            why = sub.errors.front();
        }
        if (k == "oneOf" && matched != 1)
          fail(where, matched == 0 ? "matches none of oneOf (" + why + ")"
                                   : "matches more than one of oneOf");
        if (k == "anyOf" && matched == 0) fail(where, "matches none of anyOf (" + why + ")");
      } else if (k == "minimum" || k == "exclusiveMinimum" || k == "maximum") {
        if (!v.is_number()) continue;
        const double x = v.get<double>(), lim = rule.get<double>();
        const bool ok = k == "minimum" ? x >= lim : k == "maximum" ? x <= lim : x > lim;
        if (!ok) fail(where, v.dump() + " violates " + k + " " + rule.dump());
      } else if (k == "minItems") {
        if (v.is_array() && v.size() < rule.get<size_t>())
          fail(where,
               "has " + std::to_string(v.size()) + " items, at least " + rule.dump() + " expected");
      } else if (k == "minLength") {
        if (v.is_string() && v.get<std::string>().size() < rule.get<size_t>())
          fail(where, "is shorter than " + rule.dump() + " characters");
      } else if (k == "pattern") {
        if (v.is_string() &&
            !std::regex_search(v.get<std::string>(), std::regex(rule.get<std::string>())))
          fail(where, v.dump() + " does not match " + rule.dump());
      } else {
        throw std::invalid_argument("schema keyword '" + k + "' at " + where +
                                    " is not implemented by latprof's validator");
      }
    }
  }
};

}  // namespace

std::vector<std::string> schema_violations(const nlohmann::json& doc, const nlohmann::json& schema,
                                           size_t max_errors) {
  Validator v{schema, max_errors, {}};
  v.check(doc, schema, "");
  return v.errors;
}

std::string run_report_schema_path() {
  const char* dir = std::getenv("LATPROF_SCHEMA_DIR");
  const std::string d = dir && *dir ? dir : std::string(LATPROF_SOURCE_DIR) + "/reports/schema";
  return d + "/run-report.schema.json";
}

nlohmann::json load_run_report_schema() {
  const std::string path = run_report_schema_path();
  std::ifstream in(path);
  if (!in) usage_error("cannot open the report schema " + path + "; set LATPROF_SCHEMA_DIR");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    usage_error(path + ": not valid JSON: " + e.what());
  }
}

}  // namespace latprof
