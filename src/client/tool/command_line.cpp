#include "command_line.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>

namespace relaybus::tool {

namespace {

// No guessing: an abbreviation of an option is an unknown option (see the header).
constexpr int kStyle =
    po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
constexpr unsigned kHelpWidth = 100;

bool is_help(const std::string& word) {
  return word == "--help" || word == "-h";
}

std::string synopsis(const Command& c) {
  return c.arguments.empty() ? c.name : c.name + " " + c.arguments;
}

// Commands whose name starts with `group` followed by a space ("dead" -> dead list, ...).
std::vector<const Command*> members(const Program& p, const std::string& group) {
  std::vector<const Command*> out;
  for (const auto& c : p.commands)
    if (c.name.rfind(group + " ", 0) == 0) out.push_back(&c);
  return out;
}

const Command* find(const Program& p, const std::string& name) {
  for (const auto& c : p.commands)
    if (c.name == name) return &c;
  return nullptr;
}

void list_commands(std::ostream& out, const std::vector<const Command*>& commands) {
  std::size_t width = 0;
  for (const auto* c : commands) width = std::max(width, synopsis(*c).size());
  for (const auto* c : commands) {
    const std::string s = synopsis(*c);
    out << "  " << s << std::string(width - s.size() + 3, ' ') << c->summary << "\n";
  }
}

void program_help(const Program& p, std::ostream& out) {
  out << p.name << " " << p.version << ": " << p.summary << "\n\n"
      << "usage: " << p.name << " COMMAND [ARGUMENTS] [OPTIONS]\n"
      << "       " << p.name << " COMMAND --help    the command's arguments and options\n"
      << "       " << p.name << " --version\n\ncommands:\n";
  std::vector<const Command*> all;
  for (const auto& c : p.commands) all.push_back(&c);
  list_commands(out, all);
  if (!p.epilog.empty()) out << "\n" << p.epilog;
}

void group_help(const Program& p, const std::string& group, std::ostream& out) {
  out << "usage: " << p.name << " " << group << " SUBCOMMAND [ARGUMENTS] [OPTIONS]\n\n"
      << "subcommands (" << p.name << " " << group << " SUBCOMMAND --help for each):\n";
  list_commands(out, members(p, group));
}

po::options_description visible_options(const Program& p, const Command& c) {
  po::options_description visible("options", kHelpWidth, kHelpWidth / 2);
  if (p.common_options) p.common_options(visible);
  if (c.options) c.options(visible);
  visible.add_options()("help,h", "show this help and exit");
  return visible;
}

void command_help(const Program& p, const Command& c, std::ostream& out) {
  out << "usage: " << p.name << " " << synopsis(c) << " [OPTIONS]\n\n"
      << c.summary << "\n\n"
      << visible_options(p, c);
  if (!c.details.empty()) out << "\n" << c.details;
}

// The one line a usage error prints: what is wrong, and where the right usage is.
int usage_error(const Program& p, const std::string& where, const std::string& message) {
  const std::string help = where.empty() ? p.name + " --help" : p.name + " " + where + " --help";
  std::cerr << p.name << (where.empty() ? "" : " " + where) << ": " << message << " (see " << help
            << ")" << std::endl;
  return kUsageError;
}

int run_command(const Program& p, const Command& c, const std::vector<std::string>& rest) {
  po::options_description all = visible_options(p, c);
  po::options_description hidden;
  hidden.add_options()("argument", po::value<std::vector<std::string>>());
  all.add(hidden);
  po::positional_options_description positional;
  positional.add("argument", -1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(rest).options(all).positional(positional).style(kStyle).run(),
              vm);
    if (vm.count("help")) {
      command_help(p, c, std::cout);
      return 0;
    }
    po::notify(vm);
  } catch (const po::unknown_option& e) {
    return usage_error(p, c.name, "unknown option " + e.get_option_name());
  } catch (const po::error& e) {
    return usage_error(p, c.name, e.what());
  }
  std::vector<std::string> arguments;
  if (vm.count("argument")) arguments = vm["argument"].as<std::vector<std::string>>();
  if (arguments.size() > c.max_arguments)
    return usage_error(p, c.name, "unexpected argument '" + arguments[c.max_arguments] + "'");
  try {
    return c.run(Parsed(std::move(vm), std::move(arguments)));
  } catch (const UsageError& e) {
    return usage_error(p, c.name, e.what());
  }
}

std::string member_names(const Program& p, const std::string& group) {
  std::string names;
  for (const auto* c : members(p, group))
    names += (names.empty() ? "" : ", ") + c->name.substr(group.size() + 1);
  return names;
}

// `help`, `help stats`, `help dead requeue`: the same as --help at that place.
int help(const Program& p, const std::vector<std::string>& words) {
  std::string name;
  for (const auto& w : words) name += (name.empty() ? "" : " ") + w;
  if (name.empty()) {
    program_help(p, std::cout);
    return 0;
  }
  if (const Command* c = find(p, name)) {
    command_help(p, *c, std::cout);
    return 0;
  }
  if (!members(p, name).empty()) {
    group_help(p, name, std::cout);
    return 0;
  }
  return usage_error(p, "", "unknown command '" + name + "'");
}

// The program's common options (--db) may come before the command too: `relaybus --db X
// stats` is `relaybus stats --db X`. Moves them from the front of `words` to its end, after
// the command and its arguments, where the command's parser takes them. Stops at the first
// word that is not one of them (the command, --help, --version, an unknown option).
// Returns a usage error's message, or "" when all is well.
std::string move_leading_common_options(const Program& p, std::vector<std::string>& words) {
  if (!p.common_options) return "";
  po::options_description common;
  p.common_options(common);
  std::vector<std::string> leading;
  while (!words.empty() && words[0].rfind("--", 0) == 0 && words[0].size() > 2) {
    std::string name = words[0].substr(2);
    const std::size_t equals = name.find('=');
    if (equals != std::string::npos) name.erase(equals);
    const po::option_description* option = common.find_nothrow(name, false);
    if (option == nullptr) break;
    leading.push_back(words[0]);
    words.erase(words.begin());
    if (equals == std::string::npos && option->semantic()->max_tokens() > 0) {
      if (words.empty()) return "--" + name + " needs a value";
      leading.push_back(words[0]);
      words.erase(words.begin());
    }
  }
  if (!leading.empty() && words.empty()) return "a command is needed after " + leading[0];
  words.insert(words.end(), leading.begin(), leading.end());
  return "";
}

int run_unchecked(const Program& p, int argc, const char* const* argv) {
  std::vector<std::string> words(argv + 1, argv + argc);
  const std::string misplaced = move_leading_common_options(p, words);
  if (!misplaced.empty()) return usage_error(p, "", misplaced);
  if (words.empty()) {
    program_help(p, std::cerr);
    return kUsageError;
  }
  const std::string& first = words[0];
  if (is_help(first)) {
    program_help(p, std::cout);
    return 0;
  }
  if (first == "--version") {
    if (words.size() > 1) return usage_error(p, "", "--version takes nothing after it");
    std::cout << p.name << " " << p.version << "\n";  // flushed by checked_output
    return 0;
  }
  if (first == "help") return help(p, {words.begin() + 1, words.end()});
  if (first.rfind("-", 0) == 0) return usage_error(p, "", "unknown option " + first);

  // The longest run of leading words that names a command: "dead requeue" before "dead".
  if (words.size() >= 2 && words[1].rfind("-", 0) != 0) {
    if (const Command* c = find(p, first + " " + words[1]))
      return run_command(p, *c, {words.begin() + 2, words.end()});
  }
  if (const Command* c = find(p, first))
    return run_command(p, *c, {words.begin() + 1, words.end()});
  if (!members(p, first).empty()) {
    if (words.size() >= 2 && is_help(words[1])) {
      group_help(p, first, std::cout);
      return 0;
    }
    if (words.size() >= 2 && words[1].rfind("-", 0) != 0)
      return usage_error(
          p, first,
          "unknown subcommand '" + words[1] + "' (there are: " + member_names(p, first) + ")");
    return usage_error(p, first, "a subcommand is needed: " + member_names(p, first));
  }
  std::string message = "unknown command '" + first + "'";
  const std::string note = p.moved ? p.moved(first) : "";
  if (!note.empty()) message += ": " + note;
  return usage_error(p, "", message);
}

// What the command printed must have reached stdout (a full disk, a closed pipe): when it
// did not, the command failed, whatever it returned.
int checked_output(const Program& p, int code) {
  errno = 0;
  std::cout.flush();  // synchronized with stdio: this flushes stdout, and may fail
  const bool flushed = std::fflush(stdout) == 0;
  if (flushed && !std::ferror(stdout) && std::cout.good()) return code;
  const int error = errno;
  std::cerr << p.name << ": cannot write output: " << (error ? std::strerror(error) : "write error")
            << std::endl;
  return code == 0 ? kRuntimeError : code;
}

}  // namespace

int run_program(const Program& p, int argc, const char* const* argv) {
  return checked_output(p, run_unchecked(p, argc, argv));
}

}  // namespace relaybus::tool
