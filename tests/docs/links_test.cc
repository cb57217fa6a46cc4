// Every relative link of the README, the pages under docs/ and
// deploy/OPERATIONS.md leads somewhere: the file exists, and a link to a
// heading of a Markdown file (`cli.md#autotuned`) names one, as GitHub
// makes heading anchors. A section renamed or moved fails here, naming the
// page, the link and what is missing.
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/file.h"
#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune {
namespace {

using ::testing::IsEmpty;

constexpr char kSourceDir[] = AUTOTUNE_SOURCE_DIR;

// The lines of `markdown` outside fenced code blocks.
std::vector<std::string> ProseLines(const std::string& markdown) {
  std::vector<std::string> lines;
  bool fenced = false;
  for (absl::string_view line : absl::StrSplit(markdown, '\n')) {
    if (absl::StartsWith(line, "```")) {
      fenced = !fenced;
      continue;
    }
    if (!fenced) lines.emplace_back(line);
  }
  return lines;
}

// GitHub's anchor of a heading: lower case, every character but letters,
// digits, '-', '_' and spaces dropped, spaces made '-'; a repeated anchor
// gets "-1", "-2", ...
std::set<std::string> Anchors(const std::string& markdown) {
  std::set<std::string> anchors;
  std::map<std::string, int> seen;
  for (const std::string& line : ProseLines(markdown)) {
    const size_t level = line.find_first_not_of('#');
    if (level == 0 || level == std::string::npos || level > 6 || line[level] != ' ') continue;
    std::string anchor;
    for (char c : line.substr(level + 1)) {
      if (absl::ascii_isalnum(c) || c == '-' || c == '_') {
        anchor.push_back(absl::ascii_tolower(c));
      } else if (c == ' ') {
        anchor.push_back('-');
      }
    }
    const int n = seen[anchor]++;
    anchors.insert(n == 0 ? anchor : absl::StrCat(anchor, "-", n));
  }
  return anchors;
}

// The targets of the inline links `[text](target)` of `markdown`.
std::vector<std::string> LinkTargets(const std::string& markdown) {
  std::vector<std::string> targets;
  for (const std::string& line : ProseLines(markdown)) {
    for (size_t at = line.find("]("); at != std::string::npos; at = line.find("](", at + 2)) {
      const size_t end = line.find(')', at + 2);
      if (end == std::string::npos) break;
      targets.push_back(line.substr(at + 2, end - at - 2));
    }
  }
  return targets;
}

std::vector<std::string> Pages() {
  std::vector<std::string> pages = {"README.md", "deploy/OPERATIONS.md"};
  for (const auto& entry : std::filesystem::directory_iterator(absl::StrCat(kSourceDir, "/docs"))) {
    if (entry.path().extension() == ".md") {
      pages.push_back(absl::StrCat("docs/", entry.path().filename().string()));
    }
  }
  return pages;
}

// "page: link: what is wrong" for each link of `page` that leads nowhere.
std::vector<std::string> BrokenLinks(const std::string& page) {
  std::vector<std::string> broken;
  const std::filesystem::path root(kSourceDir);
  absl::StatusOr<std::string> text = ReadFile((root / page).string());
  if (!text.ok()) return {absl::StrCat(page, ": ", text.status().message())};
  for (const std::string& target : LinkTargets(*text)) {
    if (absl::StrContains(target, "://") || absl::StartsWith(target, "mailto:")) continue;
    const std::vector<std::string> parts = absl::StrSplit(target, absl::MaxSplits('#', 1));
    const std::filesystem::path file =
        parts[0].empty()
            ? root / page
            : (root / std::filesystem::path(page).parent_path() / parts[0]).lexically_normal();
    if (!std::filesystem::exists(file)) {
      broken.push_back(absl::StrCat(page, ": ", target, ": no file ", file.string()));
      continue;
    }
    if (parts.size() < 2 || file.extension() != ".md") continue;
    absl::StatusOr<std::string> linked = ReadFile(file.string());
    if (!linked.ok() || !Anchors(*linked).contains(parts[1])) {
      broken.push_back(
          absl::StrCat(page, ": ", target, ": no heading with the anchor #", parts[1]));
    }
  }
  return broken;
}

TEST(LinksTest, EveryRelativeLinkOfTheDocsLeadsToAFileAndHeading) {
  std::vector<std::string> broken;
  for (const std::string& page : Pages()) {
    for (std::string& link : BrokenLinks(page)) broken.push_back(std::move(link));
  }
  EXPECT_THAT(broken, IsEmpty()) << absl::StrJoin(broken, "\n");
}

TEST(LinksTest, AnchorsAreMadeAsGitHubMakesThem) {
  const std::set<std::string> anchors = Anchors(
      "# T\n## `autotuned`\n## Upgrading NVRTC, the driver or the GPU\n### 7. Start-up lookups "
      "in C++\n## Files\n## Files\n```\n## not a heading\n```\n");
  EXPECT_THAT(anchors, ::testing::UnorderedElementsAre(
                           "t", "autotuned", "upgrading-nvrtc-the-driver-or-the-gpu",
                           "7-start-up-lookups-in-c", "files", "files-1"));
}

}  // namespace
}  // namespace autotune
