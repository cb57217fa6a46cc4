// docs/descriptor.md, the reference of the family descriptor, against the
// proto it documents: every field of v1::KernelFamily and of every message it
// reaches, and every value of every enum they use, has its row, with the
// field's type or the value's number as the proto declares it; and the page
// names nothing the proto lacks. A field added, renamed or retyped in
// proto/autotune.proto fails here, named, until the page says what it does.
//
// The page's format, which docs/descriptor.md states for its writers:
//   - each message and enum has a section headed "## `Name`" (a nested type
//     by its path: "## `Fill.Kind`");
//   - each field has a table row "| `Message.field` | `type` | ... |", the
//     type written as in the proto ("repeated string", "Fill.Kind",
//     "map<string, int64>");
//   - each enum value has a row "| `Enum.VALUE` | number | ... |"; aliases of
//     one number share it: "| `DType.BFLOAT16`, `DType.bf16` | 3 | ... |".
// Every table row whose first cell opens with a code span is such a row.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/file.h"
#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "gtest/gtest.h"
#include "proto/autotune.pb.h"

namespace autotune {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::EnumDescriptor;
using google::protobuf::EnumValueDescriptor;
using google::protobuf::FieldDescriptor;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kReferencePath[] = AUTOTUNE_SOURCE_DIR "/docs/descriptor.md";
constexpr absl::string_view kPackage = "autotune.v1.";

// A type's name as the page writes it: its full name without the package.
std::string PageName(absl::string_view full_name) {
  return std::string(absl::StripPrefix(full_name, kPackage));
}

// What the page must document: the messages and enums reachable from
// KernelFamily, by page name. Map entries are not types of their own: the
// map field's row covers them, and the types of their values are followed.
struct Schema {
  std::map<std::string, const Descriptor*> messages;
  std::map<std::string, const EnumDescriptor*> enums;
};

void Reach(const Descriptor* message, Schema& schema) {
  if (!schema.messages.emplace(PageName(message->full_name()), message).second) return;
  for (int i = 0; i < message->field_count(); ++i) {
    const FieldDescriptor* field = message->field(i);
    // A map's type is its value's.
    if (field->is_map()) field = field->message_type()->map_value();
    if (field->message_type() != nullptr) Reach(field->message_type(), schema);
    if (field->enum_type() != nullptr) {
      schema.enums.emplace(PageName(field->enum_type()->full_name()), field->enum_type());
    }
  }
}

Schema DescriptorSchema() {
  Schema schema;
  Reach(v1::KernelFamily::descriptor(), schema);
  return schema;
}

// A field's type as the proto file writes it.
std::string ProtoType(const FieldDescriptor* field) {
  const auto base = [](const FieldDescriptor* f) -> std::string {
    if (f->message_type() != nullptr) return PageName(f->message_type()->full_name());
    if (f->enum_type() != nullptr) return PageName(f->enum_type()->full_name());
    return f->type_name();
  };
  if (field->is_map()) {
    const Descriptor* entry = field->message_type();
    return absl::StrCat("map<", base(entry->map_key()), ", ", base(entry->map_value()), ">");
  }
  return absl::StrCat(field->is_repeated() ? "repeated " : "", base(field));
}

// One reference row: the names in its first cell, its second cell, and its
// line for messages.
struct Row {
  int line = 0;
  std::vector<std::string> names;  // "Buffer.shape"; several for enum aliases
  std::string second_cell;         // backticks and spaces stripped
};

struct Page {
  std::set<std::string> sections;  // "KernelFamily", "Fill.Kind"
  std::vector<Row> rows;
  std::vector<std::string> malformed;  // "line 12: ..."
};

// The text of each code span of `cell`; what lies outside the spans is
// appended to `rest`.
std::vector<std::string> CodeSpans(absl::string_view cell, std::string& rest) {
  std::vector<std::string> spans;
  std::vector<absl::string_view> parts = absl::StrSplit(cell, '`');
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i % 2 == 1) {
      spans.emplace_back(parts[i]);
    } else {
      absl::StrAppend(&rest, parts[i]);
    }
  }
  if (parts.size() % 2 == 0) rest += "`";  // an unclosed span
  return spans;
}

bool IsQualifiedMember(absl::string_view name) {
  const size_t dot = name.rfind('.');
  if (dot == absl::string_view::npos || dot == 0 || dot + 1 == name.size()) return false;
  for (char c : name) {
    if (!(absl::ascii_isalnum(c) || c == '_' || c == '.')) return false;
  }
  return true;
}

Page ParsePage(absl::string_view markdown) {
  Page page;
  int line_number = 0;
  bool in_fence = false;
  for (absl::string_view line : absl::StrSplit(markdown, '\n')) {
    ++line_number;
    if (absl::StartsWith(line, "```")) in_fence = !in_fence;
    if (in_fence) continue;
    absl::string_view heading = line;
    if (absl::ConsumePrefix(&heading, "## ") || absl::ConsumePrefix(&heading, "### ")) {
      heading = absl::StripAsciiWhitespace(heading);
      if (heading.size() > 2 && absl::StartsWith(heading, "`") && absl::EndsWith(heading, "`") &&
          heading.substr(1, heading.size() - 2).find('`') == absl::string_view::npos) {
        page.sections.emplace(heading.substr(1, heading.size() - 2));
      }
      continue;
    }
    if (!absl::StartsWith(line, "| `")) continue;
    std::vector<absl::string_view> cells = absl::StrSplit(line, '|');
    // "| a | b |" splits into "", " a ", " b ", "".
    if (cells.size() < 4) {
      page.malformed.push_back(absl::StrCat("line ", line_number, ": a row needs two cells"));
      continue;
    }
    Row row;
    row.line = line_number;
    std::string rest;
    row.names = CodeSpans(cells[1], rest);
    absl::RemoveExtraAsciiWhitespace(&rest);
    if (!absl::StrReplaceAll(rest, {{",", ""}, {" ", ""}}).empty()) {
      page.malformed.push_back(absl::StrCat("line ", line_number, ": the first cell holds '",
                                            absl::StripAsciiWhitespace(cells[1]),
                                            "'; write `Message.field`, or `Enum.VALUE` (aliases "
                                            "separated by commas), and nothing else"));
      continue;
    }
    bool names_ok = true;
    for (const std::string& name : row.names) {
      if (!IsQualifiedMember(name)) {
        page.malformed.push_back(absl::StrCat("line ", line_number, ": `", name,
                                              "` is not of the form `Message.field`"));
        names_ok = false;
      }
    }
    if (!names_ok) continue;
    row.second_cell = absl::StrReplaceAll(absl::StripAsciiWhitespace(cells[2]), {{"`", ""}});
    page.rows.push_back(std::move(row));
  }
  return page;
}

// What the page gets wrong against the proto, one message per problem, each
// naming the field, value or type at fault.
struct Findings {
  std::vector<std::string> undocumented;  // in the proto, not on the page
  std::vector<std::string> unknown;       // on the page, not in the proto
  std::vector<std::string> wrong;         // a type or number that differs, a duplicate
  std::vector<std::string> sections;      // a section missing or unknown
};

Findings Check(const Schema& schema, const Page& page) {
  Findings findings;
  std::map<std::string, int> documented;  // name -> line
  for (const Row& row : page.rows) {
    for (const std::string& name : row.names) {
      const auto [it, inserted] = documented.emplace(name, row.line);
      if (!inserted) {
        findings.wrong.push_back(absl::StrCat("line ", row.line, ": `", name,
                                              "` has a row already, on line ", it->second));
      }
      const size_t dot = name.rfind('.');
      const std::string type = name.substr(0, dot);
      const std::string member = name.substr(dot + 1);
      if (const auto message = schema.messages.find(type); message != schema.messages.end()) {
        const FieldDescriptor* field = message->second->FindFieldByName(member);
        if (field == nullptr) {
          findings.unknown.push_back(absl::StrCat("line ", row.line, ": `", name,
                                                  "`: ", message->second->full_name(),
                                                  " has no field '", member, "'"));
        } else if (row.second_cell != ProtoType(field)) {
          findings.wrong.push_back(absl::StrCat("line ", row.line, ": `", name, "` is `",
                                                ProtoType(field), "` in the proto, not `",
                                                row.second_cell, "`"));
        }
      } else if (const auto enumeration = schema.enums.find(type);
                 enumeration != schema.enums.end()) {
        const EnumValueDescriptor* value = enumeration->second->FindValueByName(member);
        if (value == nullptr) {
          findings.unknown.push_back(absl::StrCat("line ", row.line, ": `", name,
                                                  "`: ", enumeration->second->full_name(),
                                                  " has no value '", member, "'"));
        } else if (row.second_cell != absl::StrCat(value->number())) {
          findings.wrong.push_back(absl::StrCat("line ", row.line, ": `", name, "` is ",
                                                value->number(), " in the proto, not ",
                                                row.second_cell));
        }
      } else {
        findings.unknown.push_back(absl::StrCat("line ", row.line, ": `", name, "`: '", type,
                                                "' is no message or enum of the descriptor"));
      }
    }
  }
  for (const auto& [name, message] : schema.messages) {
    for (int i = 0; i < message->field_count(); ++i) {
      const std::string field = absl::StrCat(name, ".", message->field(i)->name());
      if (!documented.contains(field)) {
        findings.undocumented.push_back(
            absl::StrCat("`", field, "` (", ProtoType(message->field(i)), ")"));
      }
    }
    if (!page.sections.contains(name)) {
      findings.sections.push_back(absl::StrCat("no section \"## `", name, "`\""));
    }
  }
  for (const auto& [name, enumeration] : schema.enums) {
    for (int i = 0; i < enumeration->value_count(); ++i) {
      const std::string value = absl::StrCat(name, ".", enumeration->value(i)->name());
      if (!documented.contains(value)) {
        findings.undocumented.push_back(
            absl::StrCat("`", value, "` (", enumeration->value(i)->number(), ")"));
      }
    }
    if (!page.sections.contains(name)) {
      findings.sections.push_back(absl::StrCat("no section \"## `", name, "`\""));
    }
  }
  for (const std::string& section : page.sections) {
    if (!schema.messages.contains(section) && !schema.enums.contains(section)) {
      findings.sections.push_back(
          absl::StrCat("section `", section, "` names no message or enum of the descriptor"));
    }
  }
  return findings;
}

std::string ReadReference() {
  absl::StatusOr<std::string> text = ReadFile(kReferencePath);
  EXPECT_OK(text.status());
  return text.ok() ? *text : std::string();
}

TEST(DescriptorReferenceTest, TheReferenceRowsAreWellFormed) {
  const Page page = ParsePage(ReadReference());
  EXPECT_THAT(page.malformed, IsEmpty()) << kReferencePath << ":\n"
                                         << absl::StrJoin(page.malformed, "\n");
  EXPECT_FALSE(page.rows.empty()) << kReferencePath << " has no reference rows";
}

TEST(DescriptorReferenceTest, EveryFieldAndEnumValueOfTheDescriptorIsDocumented) {
  const Findings findings = Check(DescriptorSchema(), ParsePage(ReadReference()));
  EXPECT_THAT(findings.undocumented, IsEmpty())
      << kReferencePath << " has no row for these, which proto/autotune.proto declares:\n  "
      << absl::StrJoin(findings.undocumented, "\n  ");
}

TEST(DescriptorReferenceTest, EveryDocumentedNameIsInTheProto) {
  const Findings findings = Check(DescriptorSchema(), ParsePage(ReadReference()));
  EXPECT_THAT(findings.unknown, IsEmpty())
      << kReferencePath << " documents what proto/autotune.proto does not declare:\n  "
      << absl::StrJoin(findings.unknown, "\n  ");
}

TEST(DescriptorReferenceTest, TypesAndNumbersMatchTheProto) {
  const Findings findings = Check(DescriptorSchema(), ParsePage(ReadReference()));
  EXPECT_THAT(findings.wrong, IsEmpty())
      << kReferencePath << ":\n  " << absl::StrJoin(findings.wrong, "\n  ");
}

TEST(DescriptorReferenceTest, EveryMessageAndEnumHasItsSection) {
  const Findings findings = Check(DescriptorSchema(), ParsePage(ReadReference()));
  EXPECT_THAT(findings.sections, IsEmpty())
      << kReferencePath << ":\n  " << absl::StrJoin(findings.sections, "\n  ");
}

// The check itself, on the page with one row dropped, one invented and one
// type changed: each is found and named.
TEST(DescriptorReferenceTest, TheCheckNamesADroppedAnInventedAndAWrongRow) {
  std::string page = ReadReference();
  std::vector<std::string> lines = absl::StrSplit(page, '\n');
  bool dropped = false, retyped = false;
  std::vector<std::string> edited;
  for (std::string& line : lines) {
    if (absl::StartsWith(line, "| `Buffer.fill` |")) {
      dropped = true;
      continue;
    }
    if (absl::StartsWith(line, "| `TunableParameter.values` |")) {
      line = "| `TunableParameter.values` | `repeated int32` | required | | |";
      retyped = true;
    }
    edited.push_back(line);
  }
  edited.push_back("| `Buffer.colour` | `string` | optional | | |");
  ASSERT_TRUE(dropped && retyped) << "the rows this test edits are gone from " << kReferencePath;

  const Findings findings = Check(DescriptorSchema(), ParsePage(absl::StrJoin(edited, "\n")));
  EXPECT_THAT(absl::StrJoin(findings.undocumented, "\n"), HasSubstr("`Buffer.fill` (Fill)"));
  EXPECT_THAT(absl::StrJoin(findings.unknown, "\n"),
              HasSubstr("`Buffer.colour`: autotune.v1.Buffer has no field 'colour'"));
  EXPECT_THAT(absl::StrJoin(findings.wrong, "\n"),
              HasSubstr("`TunableParameter.values` is `repeated int64` in the proto, not "
                        "`repeated int32`"));
}

}  // namespace
}  // namespace autotune
