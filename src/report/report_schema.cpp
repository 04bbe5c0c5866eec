#include "report/report_schema.hpp"

#include <map>
#include <sstream>
#include <type_traits>

#include "report/report_fields.hpp"

namespace latprof {

namespace {

using nlohmann::json;
using namespace fields;

std::vector<std::string> split_choices(const char* c) {
  std::vector<std::string> out;
  std::stringstream ss(c ? c : "");
  std::string s;
  while (std::getline(ss, s, '|')) out.push_back(s);
  return out;
}

bool required(const Spec& s) {
  return !(s.flags & (kOptional | kOmitEmpty));
}

// The bounds of a number, from its flags.
void bounds(json& o, const Spec& s) {
  if (s.flags & kMin0) o["minimum"] = 0;
  if (s.flags & kMin1) o["minimum"] = 1;
  if (s.flags & kPositive) o["exclusiveMinimum"] = 0;
}

template <class T>
struct IsVector : std::false_type {};
template <class T>
struct IsVector<std::vector<T>> : std::true_type {};

// ---- JSON Schema ------------------------------------------------------------------------------

struct SchemaGen {
  json& obj;   // the object schema being filled: "properties", "required"
  json& defs;  // the root's $defs

  template <class T>
  json schema_of(const Spec& s) {
    json o;
    if constexpr (std::is_same_v<T, std::string>) {
      o["type"] = s.flags & kNullWhenEmpty ? json::array({"string", "null"}) : json("string");
      if (s.choices) {
        json e = split_choices(s.choices);
        if (s.flags & kNullWhenEmpty) e.push_back(nullptr);
        o["enum"] = e;
      }
      if (s.pattern) o["pattern"] = s.pattern;
    } else if constexpr (std::is_same_v<T, bool>) {
      o["type"] = "boolean";
    } else if constexpr (std::is_floating_point_v<T>) {
      o["type"] = json::array({"number", "null"});
      bounds(o, s);
    } else if constexpr (std::is_integral_v<T>) {
      o["type"] = "integer";
      bounds(o, s);
    } else if constexpr (std::is_same_v<T, json>) {
      o["type"] = s.flags & kNullable ? json::array({"object", "null"}) : json("object");
    } else if constexpr (std::is_same_v<T, Untyped>) {
      o = json::object();
    } else if constexpr (is_record_v<T>) {
      define<T>();
      o["$ref"] = std::string("#/$defs/") + Record<T>::name;
      if (s.flags & kNullable) o = {{"oneOf", json::array({std::move(o), json{{"type", "null"}}})}};
    } else if constexpr (IsVector<T>::value) {
      Spec item = s;
      item.flags &= ~(kOptional | kOmitEmpty);
      o["type"] = "array";
      o["items"] = schema_of<typename T::value_type>(item);
      o["items"].erase("description");
      if (s.item_requires) o["items"]["required"] = json::array({s.item_requires});
    } else {
      static_assert(sizeof(T) == 0, "a report field of a type the schema does not know");
    }
    return o;
  }

  template <class T>
  void define() {
    const char* name = Record<T>::name;
    if (defs.contains(name)) return;
    json d = {{"type", "object"}, {"description", Record<T>::meaning}};
    defs[name] = json::object();  // reserve: a record may refer to itself
    SchemaGen g{d, defs};
    const T proto{};
    describe(g, proto);
    defs[name] = d;
  }

  void add(const char* name, json o, const Spec& s) {
    o["description"] = s.meaning;
    if (*s.unit) o["x-unit"] = s.unit;
    obj["properties"][name] = std::move(o);
    if (required(s)) obj["required"].push_back(name);
  }
  template <class T>
  void operator()(const char* name, const T&, const Spec& s) {
    add(name, schema_of<T>(s), s);
  }
  template <class T>
  void operator()(const char* name, Doc<T>, const Spec& s) {
    add(name, schema_of<T>(s), s);
  }
  template <class T>
  void derived(const char* name, const T& v, const Spec& s) {
    (*this)(name, v, s);
  }
  template <class F>
  void object(const char* name, const Spec& s, F&& body) {
    json o = {{"type", s.flags & kNullable ? json::array({"object", "null"}) : json("object")}};
    SchemaGen g{o, defs};
    body(g);
    add(name, std::move(o), s);
  }
  template <class F>
  void opaque(const char* name, const json&, const Spec& s, F&& docs) {
    if (!(s.flags & kArray)) return object(name, s, docs);
    json item = {{"type", "object"}};
    SchemaGen g{item, defs};
    docs(g);
    json o = {{"type", s.flags & kNullable ? json::array({"array", "null"}) : json("array")},
              {"items", std::move(item)}};
    add(name, std::move(o), s);
  }
};

// ---- README table -----------------------------------------------------------------------------

struct MarkdownGen {
  std::string prefix;
  std::vector<std::string>* lines;

  static std::string cell(const std::string& s) {
    std::string o;
    for (char c : s) o += c == '|' ? std::string("\\|") : std::string(1, c);
    return o;
  }
  template <class T>
  static std::string type_name(const Spec& s) {
    if constexpr (std::is_same_v<T, std::string>)
      return s.flags & kNullWhenEmpty ? "string or null" : "string";
    else if constexpr (std::is_same_v<T, bool>)
      return "boolean";
    else if constexpr (std::is_floating_point_v<T>)
      return "number";
    else if constexpr (std::is_integral_v<T>)
      return "integer";
    else if constexpr (std::is_same_v<T, json>)
      return s.flags & kNullable ? "object or null" : "object";
    else if constexpr (std::is_same_v<T, Untyped>)
      return "number or string";
    else if constexpr (is_record_v<T>) {
      std::string link = "[";
      link.append(Record<T>::name).append("](#").append(Record<T>::name).append("-object)");
      if (s.flags & kNullable) link += " or null";
      return link;
    } else if constexpr (IsVector<T>::value)
      return type_name<typename T::value_type>(s) + "[]";
    else
      static_assert(sizeof(T) == 0, "unknown field type");
  }
  void line(const char* name, const std::string& type, const Spec& s) {
    std::string meaning = s.meaning;
    const auto choices = split_choices(s.choices);
    if (!choices.empty()) {
      meaning += "; one of ";
      for (size_t i = 0; i < choices.size(); ++i) {
        meaning += i ? ", `" : "`";
        meaning += choices[i];
        meaning += '`';
      }
    }
    if (s.flags & kOmitEmpty) meaning += "; absent when empty";
    lines->push_back("| `" + prefix + name + "` | " + cell(type) + " | " + cell(s.unit) + " | " +
                     cell(meaning) + " |");
  }
  template <class T>
  void operator()(const char* name, const T&, const Spec& s) {
    line(name, type_name<T>(s), s);
  }
  template <class T>
  void operator()(const char* name, Doc<T>, const Spec& s) {
    line(name, type_name<T>(s), s);
  }
  template <class T>
  void derived(const char* name, const T& v, const Spec& s) {
    (*this)(name, v, s);
  }
  template <class F>
  void object(const char* name, const Spec& s, F&& body) {
    line(name, s.flags & kNullable ? "object or null" : "object", s);
    MarkdownGen sub{prefix + name + ".", lines};
    body(sub);
  }
  template <class F>
  void opaque(const char* name, const json&, const Spec& s, F&& docs) {
    if (!(s.flags & kArray)) return object(name, s, docs);
    line(name, s.flags & kNullable ? "object[] or null" : "object[]", s);
    MarkdownGen sub{prefix + name + "[].", lines};
    docs(sub);
  }
};

const char* kHeader = "| field | type | unit | meaning |\n| --- | --- | --- | --- |\n";

template <class T>
std::string record_table() {
  std::vector<std::string> lines;
  MarkdownGen g{"", &lines};
  const T proto{};
  describe(g, proto);
  std::string out = std::string("##### ") + Record<T>::name + " object\n\n" + Record<T>::meaning +
                    ".\n\n" + kHeader;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

}  // namespace

nlohmann::json run_report_schema() {
  json s = {{"$schema", "https://json-schema.org/draft/2020-12/schema"},
            {"$id", "urn:latprof:run-report:" + std::to_string(kSchemaMajor)},
            {"title", "latprof run report"},
            {"description",
             "The --json report of 'latprof run', schema version " + std::to_string(kSchemaMajor) +
                 ".x, generated by 'latprof schema' from src/report/report_fields.hpp. Major "
                 "versions break readers (fields removed, renamed or changed in type, unit or "
                 "meaning); minor versions only add fields, so every " +
                 std::to_string(kSchemaMajor) +
                 ".x report validates against this schema and unknown fields must be ignored. "
                 "Numbers that cannot be computed (NaN, infinity) are written as null. x-unit "
                 "gives a number's unit."},
            {"x-latprof-schema-version", kSchemaVersion},
            {"type", "object"},
            {"$defs", json::object()}};
  SchemaGen g{s, s["$defs"]};
  const RunReport proto;
  describe(g, proto);
  return s;
}

std::string run_report_schema_text() {
  return run_report_schema().dump(2) + "\n";
}

std::string run_report_markdown() {
  std::vector<std::string> lines;
  MarkdownGen g{"", &lines};
  const RunReport proto;
  describe(g, proto);
  std::string out = kHeader;
  for (const auto& l : lines) out += l + "\n";
  for (const std::string& t : {record_table<Row>(), record_table<Percentiles>(),
                               record_table<Check>(), record_table<StepRow>()})
    out.append("\n").append(t);
  return out;
}

}  // namespace latprof
