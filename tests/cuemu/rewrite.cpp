// cuemu_rewrite IN OUT: the source step of the CUDA emulation (tests/cuemu/cuemu.hpp). It turns
// the two pieces of CUDA syntax that no header can map onto C++ into calls of the emulation, and
// leaves every other byte (and every line number) of the file as it is:
//   k<<<grid, block, smem, stream>>>(args)  ->
//       ::cuemu::launch_config("k", __FILE__, __LINE__, CUEMU_KERNEL_ADDRESS(k), grid, block,
//                              smem, stream) % [=]() { k(args); }
//   (every CUDA thread runs the lambda, so template kernels deduce their arguments as usual)
//   __shared__ T a[N], b;                        ->  CUEMU_SHARED(T, a, [N]); CUEMU_SHARED(T, b, );
//   extern __shared__ T smem[];                  ->  T* const smem = ::cuemu::dynamic_shared<T>();
// Comments, string and character literals are copied untouched.
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

bool ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

// Whitespace of the replaced text collapsed to single spaces (the line count is restored with
// trailing newlines so that __LINE__ and diagnostics still point at the original lines).
std::string one_line(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
    if (c == ' ' && !r.empty() && r.back() == ' ') continue;
    r += c;
  }
  return r;
}

size_t newlines(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

[[noreturn]] void fail(const std::string& file, const std::string& what) {
  std::cerr << "cuemu_rewrite: " << file << ": " << what << "\n";
  std::exit(1);
}

// The kernel expression ending just before `end`: an identifier (possibly qualified) with an
// optional template argument list.
size_t kernel_start(const std::string& s, size_t end) {
  size_t p = end;
  while (p > 0 && std::isspace(static_cast<unsigned char>(s[p - 1]))) --p;
  if (p > 0 && s[p - 1] == '>') {
    int depth = 0;
    while (p > 0) {
      const char c = s[--p];
      if (c == '>') ++depth;
      if (c == '<' && --depth == 0) break;
    }
    while (p > 0 && std::isspace(static_cast<unsigned char>(s[p - 1]))) --p;
  }
  while (p > 0 && (ident_char(s[p - 1]) || s[p - 1] == ':')) --p;
  return p;
}

// `decl` is the text between `__shared__` and `;` of a static shared declaration.
std::string shared_decl(const std::string& file, const std::string& decl) {
  // Split the declarators at top-level commas; the type is what precedes the first name.
  std::vector<std::string> parts;
  int depth = 0;
  std::string cur;
  for (char c : decl) {
    if (c == '[' || c == '(' || c == '<') ++depth;
    if (c == ']' || c == ')' || c == '>') --depth;
    if (c == ',' && depth == 0) {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  parts.push_back(cur);
  std::string first = trim(parts[0]);
  size_t br = first.find('[');
  std::string head = br == std::string::npos ? first : first.substr(0, br);
  head = trim(head);
  size_t n = head.size();
  while (n > 0 && ident_char(head[n - 1])) --n;
  const std::string type = trim(head.substr(0, n));
  if (type.empty() || n == head.size()) fail(file, "cannot parse __shared__ declaration: " + decl);
  parts[0] = first.substr(n);
  std::string out;
  for (const std::string& p0 : parts) {
    const std::string p = trim(p0);
    if (p.find('=') != std::string::npos) fail(file, "__shared__ variables cannot be initialised");
    const size_t b = p.find('[');
    const std::string name = trim(b == std::string::npos ? p : p.substr(0, b));
    const std::string dims = b == std::string::npos ? std::string() : p.substr(b);
    out += "CUEMU_SHARED(" + one_line(type) + ", " + name + ", " + one_line(dims) + "); ";
  }
  return out;
}

std::string rewrite(const std::string& file, const std::string& s) {
  std::string out;
  size_t i = 0;
  auto starts = [&](size_t at, const char* w) { return s.compare(at, std::strlen(w), w) == 0; };
  while (i < s.size()) {
    if (starts(i, "//")) {
      const size_t e = s.find('\n', i);
      const size_t stop = e == std::string::npos ? s.size() : e;
      out += s.substr(i, stop - i);
      i = stop;
    } else if (starts(i, "/*")) {
      const size_t e = s.find("*/", i + 2);
      if (e == std::string::npos) fail(file, "unterminated comment");
      out += s.substr(i, e + 2 - i);
      i = e + 2;
    } else if (s[i] == '"' || s[i] == '\'') {
      const char q = s[i];
      size_t j = i + 1;
      while (j < s.size() && s[j] != q) j += s[j] == '\\' ? 2 : 1;
      out += s.substr(i, j + 1 - i);
      i = j + 1;
    } else if (starts(i, "<<<")) {
      const size_t e = s.find(">>>", i);
      if (e == std::string::npos) fail(file, "<<< without >>>");
      const size_t ks = kernel_start(out, out.size());
      const std::string kernel = one_line(trim(out.substr(ks)));
      if (kernel.empty()) fail(file, "no kernel name before <<<");
      const std::string cfg = s.substr(i + 3, e - i - 3);
      // The argument list: balanced parentheses after >>>.
      size_t a = e + 3;
      while (a < s.size() && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
      if (a >= s.size() || s[a] != '(') fail(file, "no argument list after >>>");
      int depth = 0;
      size_t z = a;
      for (; z < s.size(); ++z) {
        if (s[z] == '(') ++depth;
        if (s[z] == ')' && --depth == 0) break;
      }
      if (z >= s.size()) fail(file, "unbalanced argument list after >>>");
      const std::string args = s.substr(a, z + 1 - a);
      const size_t lines = newlines(out.substr(ks)) + newlines(s.substr(i, z + 1 - i));
      out.resize(ks);
      out += "::cuemu::launch_config(\"" + kernel +
             "\", __FILE__, __LINE__, CUEMU_KERNEL_ADDRESS(" + kernel + "), " + one_line(cfg) +
             ") % [=]() { " + kernel + one_line(args) + "; }";
      out += std::string(lines, '\n');
      i = z + 1;
    } else if (starts(i, "__shared__") && (i == 0 || !ident_char(s[i - 1])) &&
               !ident_char(s[i + 10])) {
      const size_t e = s.find(';', i);
      if (e == std::string::npos) fail(file, "__shared__ without ;");
      const std::string decl = s.substr(i + 10, e - i - 10);
      // extern __shared__ T name[];  (the `extern ` is already in `out`)
      size_t k = out.size();
      while (k > 0 && std::isspace(static_cast<unsigned char>(out[k - 1]))) --k;
      if (k >= 6 && out.compare(k - 6, 6, "extern") == 0 && (k == 6 || !ident_char(out[k - 7]))) {
        out.resize(k - 6);
        const std::string d = trim(decl);
        const size_t b = d.find('[');
        if (b == std::string::npos || trim(d.substr(b)) != "[]")
          fail(file, "extern __shared__ must be an unsized array: " + d);
        std::string head = trim(d.substr(0, b));
        size_t n = head.size();
        while (n > 0 && ident_char(head[n - 1])) --n;
        const std::string type = trim(head.substr(0, n)), name = head.substr(n);
        out += type + "* const " + name + " = ::cuemu::dynamic_shared<" + type + ">()";
      } else {
        out += shared_decl(file, decl);
        out.resize(out.size() - 2);  // the declaration's own ';' follows
      }
      out += std::string(newlines(decl), '\n');
      i = e;
    } else {
      out += s[i++];
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: cuemu_rewrite IN OUT\n";
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  if (!in) fail(argv[1], "cannot read");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text =
      "#line 1 \"" + std::string(argv[1]) + "\"\n" + rewrite(argv[1], ss.str());
  const std::string tmp = std::string(argv[2]) + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    out << text;
    if (!out) fail(argv[2], "cannot write");
  }
  if (std::rename(tmp.c_str(), argv[2]) != 0) fail(argv[2], "cannot rename");
  return 0;
}
