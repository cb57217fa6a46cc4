#include "kernels/include_check.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace autotune::kernels {
namespace {

// What -std changes in how NVRTC reads a source.
struct Dialect {
  const char* name;  // "" for the default reading
  bool trigraphs;
  bool raw_strings;
  bool digit_separators;
};

constexpr Dialect kDialects[] = {
    {"", false, true, true},
    {"-std=c++14", true, true, true},
    {"-std=c++11", true, true, false},
    {"-std=c++03", true, false, false},
};

bool IsIdentifierChar(char c) { return absl::ascii_isalnum(c) || c == '_'; }

// Characters NVRTC may or may not take as part of a name ('$', a UCN's
// backslash, UTF-8): a raw string right after one is ambiguous.
bool IsAmbiguousNameChar(char c) {
  return c == '$' || c == '\\' || static_cast<unsigned char>(c) >= 0x80;
}

// Space within a line, as the preprocessor skips it (a lone CR included).
bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\f' || c == '\v' || c == '\r'; }

char Trigraph(char third) {
  switch (third) {
    case '=':
      return '#';
    case '/':
      return '\\';
    case '\'':
      return '^';
    case '(':
      return '[';
    case ')':
      return ']';
    case '!':
      return '|';
    case '<':
      return '{';
    case '>':
      return '}';
    case '-':
      return '~';
    default:
      return '\0';
  }
}

// A name as shown in a message: at most 200 characters, control
// characters as '?'.
std::string Shown(absl::string_view text) {
  std::string shown(text.substr(0, 200));
  for (char& c : shown) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return shown;
}

// Parts of [A-Za-z0-9_][A-Za-z0-9_.+-]* joined by '/'.
bool IsToolkitHeaderName(absl::string_view name) {
  if (name.empty() || name.size() > 400) return false;
  for (absl::string_view part : absl::StrSplit(name, '/')) {
    if (part.empty() || !IsIdentifierChar(part[0])) return false;
    for (char c : part) {
      if (!(IsIdentifierChar(c) || c == '.' || c == '-' || c == '+')) return false;
    }
  }
  return true;
}

// One reading of a source, in one dialect.
class Scanner {
 public:
  Scanner(absl::string_view source, const Dialect& dialect, const IncludeRules& rules)
      : text_(source.substr(0, source.find('\0'))), dialect_(dialect), rules_(rules) {
    for (size_t i = 0; i < text_.size(); ++i) {
      if (text_[i] == '\n') line_feeds_.push_back(i);
    }
  }

  std::optional<IncludeProblem> Run() {
    size_t pos = 0;
    bool line_start = true;
    size_t ambiguous_end = std::string::npos;  // just after an ambiguous name character
    while (pos < text_.size()) {
      const Char ch = At(pos);
      if (ch.end) break;
      const char c = ch.c;
      if (c == '\n') {
        line_start = true;
        pos = ch.next;
        continue;
      }
      if (IsBlank(c)) {
        pos = ch.next;
        continue;
      }
      if (c == '/') {
        const Char second = At(ch.next);
        if (second.c == '/') {
          pos = SkipLineComment(second.next);
          continue;
        }
        if (second.c == '*') {
          bool spans_lines = false;
          pos = SkipBlockComment(second.next, &spans_lines);
          // NVRTC opens a directive after a comment that spans lines.
          if (spans_lines) line_start = true;
          continue;
        }
      }
      const size_t token = pos;
      const bool first = line_start;
      line_start = false;
      if (first && IsHash(pos)) {
        const Step step = Directive(token);
        if (step.problem) return step.problem;
        pos = step.pos;
        continue;
      }
      if (absl::ascii_isdigit(c) || (c == '.' && absl::ascii_isdigit(At(ch.next).c))) {
        pos = SkipPpNumber(pos);
        continue;
      }
      if (IsIdentifierChar(c)) {
        const Step step = Name(pos, pos == ambiguous_end);
        if (step.problem) return step.problem;
        pos = step.pos;
        continue;
      }
      if (c == '"' || c == '\'') {
        pos = SkipSuffix(SkipQuoted(ch.next, c));
        continue;
      }
      pos = ch.next;
      if (IsAmbiguousNameChar(c)) ambiguous_end = pos;
    }
    return std::nullopt;
  }

 private:
  // Either a position to go on from or the problem found.
  struct Step {
    size_t pos = 0;
    std::optional<IncludeProblem> problem;
  };

  // A character after line splices (and trigraphs, in dialects with them).
  struct Char {
    char c = '\0';
    size_t next = 0;   // the position after it
    bool end = false;  // no character: the end of the text
  };

  Char At(size_t pos) const {
    while (pos < text_.size()) {
      char c = text_[pos];
      size_t next = pos + 1;
      if (dialect_.trigraphs && c == '?' && pos + 2 < text_.size() && text_[pos + 1] == '?' &&
          Trigraph(text_[pos + 2]) != '\0') {
        c = Trigraph(text_[pos + 2]);
        next = pos + 3;
      }
      if (c == '\\') {
        size_t after = next;
        while (after < text_.size() && text_[after] == '\r') ++after;
        if (after < text_.size() && text_[after] == '\n') {
          pos = after + 1;  // a splice: the lines are joined
          continue;
        }
      }
      return {c, next, false};
    }
    return {'\0', text_.size(), true};
  }

  int LineOf(size_t pos) const {
    return 1 + static_cast<int>(absl::c_lower_bound(line_feeds_, pos) - line_feeds_.begin());
  }

  Step Problem(size_t pos, std::string message) const {
    if (dialect_.name[0] != '\0') absl::StrAppend(&message, " (as ", dialect_.name, " reads it)");
    return {pos, IncludeProblem{LineOf(pos), std::move(message)}};
  }

  bool IsHash(size_t pos) const {
    const Char ch = At(pos);
    return ch.c == '#' || (ch.c == '%' && At(ch.next).c == ':');
  }

  // After a '#' or "%:" at `pos`.
  size_t SkipHash(size_t pos) const {
    const Char ch = At(pos);
    return ch.c == '#' ? ch.next : At(ch.next).next;
  }

  // From `pos` to the line's end (the LF itself is left).
  size_t SkipLineComment(size_t pos) const {
    for (Char ch = At(pos); !ch.end; ch = At(pos)) {
      if (ch.c == '\n') return pos;
      pos = ch.next;
    }
    return text_.size();
  }

  // From after "/*" to after "*/", or the end of the text.
  size_t SkipBlockComment(size_t pos, bool* spans_lines) const {
    for (Char ch = At(pos); !ch.end; ch = At(pos)) {
      if (ch.c == '\n') *spans_lines = true;
      if (ch.c == '*') {
        const Char slash = At(ch.next);
        if (slash.c == '/') return slash.next;
      }
      pos = ch.next;
    }
    return text_.size();
  }

  // Blanks and comments within the line.
  size_t SkipSpace(size_t pos) const {
    while (true) {
      const Char ch = At(pos);
      if (ch.end) return pos;
      if (IsBlank(ch.c)) {
        pos = ch.next;
        continue;
      }
      if (ch.c == '/') {
        const Char second = At(ch.next);
        if (second.c == '*') {
          bool spans_lines = false;
          pos = SkipBlockComment(second.next, &spans_lines);
          continue;
        }
      }
      return pos;
    }
  }

  // From after the opening quote to after the closing one, or to the line's
  // end (an unterminated literal ends with its line).
  size_t SkipQuoted(size_t pos, char quote) const {
    for (Char ch = At(pos); !ch.end; ch = At(pos)) {
      if (ch.c == '\n') return pos;
      pos = ch.next;
      if (ch.c == quote) return pos;
      if (ch.c == '\\') {
        const Char escaped = At(pos);
        if (!escaped.end && escaped.c != '\n') pos = escaped.next;
      }
    }
    return text_.size();
  }

  // A literal's user-defined suffix: a name right after it, never a raw
  // string's prefix.
  size_t SkipSuffix(size_t pos) const {
    for (Char ch = At(pos); !ch.end && IsIdentifierChar(ch.c); ch = At(pos)) pos = ch.next;
    return pos;
  }

  size_t SkipPpNumber(size_t pos) const {
    pos = At(pos).next;
    while (true) {
      const Char ch = At(pos);
      if (ch.end) return pos;
      if (IsIdentifierChar(ch.c) || ch.c == '.') {
        const Char sign = At(ch.next);
        pos = (absl::ascii_tolower(ch.c) == 'e' || absl::ascii_tolower(ch.c) == 'p') &&
                      (sign.c == '+' || sign.c == '-')
                  ? sign.next
                  : ch.next;
        continue;
      }
      if (ch.c == '\'' && dialect_.digit_separators && IsIdentifierChar(At(ch.next).c)) {
        pos = At(ch.next).next;
        continue;
      }
      return pos;
    }
  }

  // The name at `pos` (letters, digits, '_'): [0] its text, [1] the
  // position after it.
  std::pair<std::string, size_t> ReadName(size_t pos) const {
    std::string name;
    for (Char ch = At(pos); !ch.end && IsIdentifierChar(ch.c); ch = At(pos)) {
      name.push_back(ch.c);
      pos = ch.next;
    }
    return {std::move(name), pos};
  }

  // A name in code: a raw string's prefix or __has_include.
  Step Name(size_t pos, bool after_ambiguous) const {
    auto [name, end] = ReadName(pos);
    const Char next = At(end);
    if (dialect_.raw_strings && next.c == '"' &&
        (name == "R" || name == "LR" || name == "uR" || name == "UR" || name == "u8R")) {
      return RawString(pos, name, end, next.next, after_ambiguous);
    }
    if (name == "__has_include" || name == "__has_include_next" || name == "__has_embed") {
      size_t at = SkipSpace(end);
      const Char paren = At(at);
      if (paren.c != '(') {
        return Problem(pos, absl::StrCat(name, " without a '(' and a header name; ", kIncludeRule));
      }
      return HeaderName(pos, name, SkipSpace(paren.next), /*in_parens=*/true);
    }
    return {end, std::nullopt};
  }

  // R"delim( ... )delim": its text is read as written (no splices, no
  // trigraphs).
  Step RawString(size_t pos, const std::string& prefix, size_t quote, size_t after_quote,
                 bool after_ambiguous) const {
    if (after_ambiguous) {
      return Problem(pos, absl::StrCat("a raw string literal (", prefix,
                                       "\"...) right after a character NVRTC may read as part of "
                                       "a name; put a space before it"));
    }
    if (text_.substr(pos, after_quote - pos) != absl::StrCat(prefix, "\"") ||
        quote != pos + prefix.size()) {
      return Problem(pos, "a line splice or trigraph in a raw string literal's prefix");
    }
    const size_t open = text_.find('(', after_quote);
    const absl::string_view delimiter = open == absl::string_view::npos
                                            ? text_.substr(after_quote, 17)
                                            : text_.substr(after_quote, open - after_quote);
    const bool bad_delimiter = open == absl::string_view::npos || delimiter.size() > 16 ||
                               absl::c_any_of(delimiter, [](char c) {
                                 return c == ' ' || c == ')' || c == '\\' ||
                                        static_cast<unsigned char>(c) < 0x20 ||
                                        static_cast<unsigned char>(c) >= 0x7f;
                               });
    if (bad_delimiter) {
      return Problem(pos,
                     absl::StrCat("a raw string literal with a bad delimiter '", Shown(delimiter),
                                  "' (at most 16 characters, no space, '(', ')' or '\\')"));
    }
    const size_t close = text_.find(absl::StrCat(")", delimiter, "\""), open + 1);
    if (close == absl::string_view::npos) {
      return Problem(pos, absl::StrCat("a raw string literal (", prefix, "\"", Shown(delimiter),
                                       "(...) that does not end"));
    }
    return {SkipSuffix(close + delimiter.size() + 2), std::nullopt};
  }

  // After the '#' at `hash`, a directive's name; the include-like ones
  // checked.
  Step Directive(size_t hash) const {
    size_t pos = SkipSpace(SkipHash(hash));
    // "%:%:include" and "# # include" are no directives; NVRTC still
    // complains about them, and the check reads them as includes.
    while (IsHash(pos)) pos = SkipSpace(SkipHash(pos));
    if (!IsIdentifierChar(At(pos).c)) return {pos, std::nullopt};
    auto [name, end] = ReadName(pos);
    if (name != "include" && name != "include_next" && name != "import" && name != "embed") {
      return {end, std::nullopt};
    }
    return HeaderName(hash, absl::StrCat("#", name), SkipSpace(end), /*in_parens=*/false);
  }

  // The header name at `pos` ("file" or <file>), after `what` at `start`.
  Step HeaderName(size_t start, const std::string& what, size_t pos, bool in_parens) const {
    const Char open = At(pos);
    const char close = open.c == '"' ? '"' : '>';
    std::string name;
    size_t at = open.next;
    bool closed = false;
    if (open.c == '"' || open.c == '<') {
      for (Char ch = At(at); !ch.end && ch.c != '\n'; ch = At(at)) {
        at = ch.next;
        if (ch.c == close) {
          closed = true;
          break;
        }
        name.push_back(ch.c);
      }
    }
    const std::string shown = in_parens ? absl::StrCat(what, "(", Shown(RestOfLine(pos)))
                                        : absl::StrCat(what, " ", Shown(RestOfLine(pos)));
    if (!closed) {
      return Problem(start, absl::StrCat(shown,
                                         " is computed by a macro; name the header as "
                                         "\"file\" or <file>"));
    }
    const std::string named =
        absl::StrCat(what, in_parens ? "(" : " ", std::string(1, open.c), Shown(name),
                     std::string(1, close), in_parens ? ")" : "");
    if (absl::StartsWith(name, "/") || absl::StartsWith(name, "\\")) {
      return Problem(start, absl::StrCat(named, " names an absolute path; ", kIncludeRule));
    }
    for (absl::string_view part : absl::StrSplit(name, absl::ByAnyChar("/\\"))) {
      if (part == "..") {
        return Problem(start, absl::StrCat(named, " goes up a folder (..); ", kIncludeRule));
      }
    }
    if (absl::c_linear_search(rules_.shipped, name)) return {at, std::nullopt};
    if (!rules_.toolkit_include_dir.empty() && IsToolkitHeaderName(name)) {
      struct stat info;
      const std::string path = absl::StrCat(rules_.toolkit_include_dir, "/", name);
      if (stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode)) return {at, std::nullopt};
    }
    return Problem(
        start,
        absl::StrCat(named, " is neither a header of the family's (",
                     rules_.shipped.empty() ? "it ships none" : absl::StrJoin(rules_.shipped, ", "),
                     ") nor one of the CUDA toolkit's",
                     rules_.toolkit_include_dir.empty() ? " (no toolkit found)" : "", "; ",
                     kIncludeRule));
  }

  // The logical line from `pos`, for messages.
  std::string RestOfLine(size_t pos) const {
    std::string rest;
    for (Char ch = At(pos); !ch.end && ch.c != '\n' && rest.size() < 200; ch = At(pos)) {
      rest.push_back(ch.c);
      pos = ch.next;
    }
    return std::string(absl::StripAsciiWhitespace(rest));
  }

  absl::string_view text_;
  const Dialect& dialect_;
  const IncludeRules& rules_;
  std::vector<size_t> line_feeds_;
};

}  // namespace

std::optional<IncludeProblem> FindForbiddenInclude(absl::string_view source,
                                                   const IncludeRules& rules) {
  for (const Dialect& dialect : kDialects) {
    if (std::optional<IncludeProblem> problem = Scanner(source, dialect, rules).Run()) {
      return problem;
    }
  }
  return std::nullopt;
}

std::string ToolkitIncludeDir(absl::string_view nvrtc_library_dir) {
  std::vector<std::string> candidates;
  if (const char* home = std::getenv("CUDA_HOME"); home != nullptr && home[0] != '\0') {
    candidates.push_back(absl::StrCat(home, "/include"));
  }
  if (!nvrtc_library_dir.empty()) {
    candidates.push_back(absl::StrCat(nvrtc_library_dir, "/../include"));
    candidates.push_back(absl::StrCat(nvrtc_library_dir, "/../../include"));
  }
  candidates.push_back("/usr/local/cuda/include");
  for (const std::string& dir : candidates) {
    char resolved[PATH_MAX];
    if (realpath(dir.c_str(), resolved) == nullptr) continue;
    if (access(absl::StrCat(resolved, "/cuda_fp16.h").c_str(), R_OK) == 0) return resolved;
  }
  return "";
}

}  // namespace autotune::kernels
