#include "service/daemon_flags.h"

#include <iterator>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "base/paths.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "kernels/profile_task.h"
#include "service/defaults.h"

namespace autotune::service {
namespace {

using config::v1::DaemonConfig;
using google::protobuf::FieldDescriptor;

// Collects the text-format parser's first complaint with its position.
class FirstError : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (text_.empty())
      text_ = absl::StrCat("line ", line + 1, " column ", column + 1, ": ", message);
  }
  void AddWarning(int line, google::protobuf::io::ColumnNumber column,
                  const std::string& message) override {
    AddError(line, column, message);
  }
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

std::string FlagName(const FieldDescriptor* field) {
  return absl::StrReplaceAll(field->name(), {{"_", "-"}});
}

// One value of `field` (index `i` when repeated) as the flag would take it.
std::string ValueText(const google::protobuf::Message& message, const FieldDescriptor* field,
                      int i) {
  const auto* reflection = message.GetReflection();
  const bool repeated = field->is_repeated();
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_STRING:
      return repeated ? reflection->GetRepeatedString(message, field, i)
                      : reflection->GetString(message, field);
    case FieldDescriptor::CPPTYPE_BOOL:
      return reflection->GetBool(message, field) ? "true" : "false";
    case FieldDescriptor::CPPTYPE_INT32:
      return absl::StrCat(reflection->GetInt32(message, field));
    case FieldDescriptor::CPPTYPE_INT64:
      return absl::StrCat(reflection->GetInt64(message, field));
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return absl::StrFormat("%.17g", reflection->GetDouble(message, field));
    default:
      return "";  // daemon_config.proto has no other kinds (a test checks)
  }
}

// Sets `field` of `message` from an option's value; false when it does not
// convert (cannot happen for values the option accepted).
bool SetField(google::protobuf::Message& message, const FieldDescriptor* field,
              const CLI::Option* option) {
  const auto* reflection = message.GetReflection();
  if (field->is_repeated()) {
    for (const std::string& value : option->as<std::vector<std::string>>()) {
      reflection->AddString(&message, field, value);
    }
    return true;
  }
  const std::string value = option->as<std::string>();
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_STRING:
      reflection->SetString(&message, field, value);
      return true;
    case FieldDescriptor::CPPTYPE_BOOL:
      reflection->SetBool(&message, field, option->as<bool>());
      return true;
    case FieldDescriptor::CPPTYPE_INT32: {
      int32_t number = 0;
      if (!absl::SimpleAtoi(value, &number)) return false;
      reflection->SetInt32(&message, field, number);
      return true;
    }
    case FieldDescriptor::CPPTYPE_INT64: {
      int64_t number = 0;
      if (!absl::SimpleAtoi(value, &number)) return false;
      reflection->SetInt64(&message, field, number);
      return true;
    }
    case FieldDescriptor::CPPTYPE_DOUBLE: {
      double number = 0;
      if (!absl::SimpleAtod(value, &number)) return false;
      reflection->SetDouble(&message, field, number);
      return true;
    }
    default:
      return false;
  }
}

bool OctalMode(const std::string& text) {
  return !text.empty() && text.size() <= 4 &&
         text.find_first_not_of("01234567") == std::string::npos;
}

}  // namespace

absl::StatusOr<DaemonConfig> ParseDaemonConfig(const std::string& text) {
  DaemonConfig config;
  google::protobuf::TextFormat::Parser parser;
  FirstError errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, &config)) {
    return absl::InvalidArgumentError(errors.text().empty() ? "not a DaemonConfig" : errors.text());
  }
  return config;
}

std::vector<CLI::ConfigItem> DaemonConfigFormatter::from_config(std::istream& input) const {
  const std::string text{std::istreambuf_iterator<char>(input), std::istreambuf_iterator<char>()};
  absl::StatusOr<DaemonConfig> config = ParseDaemonConfig(text);
  if (!config.ok()) throw CLI::ConfigError(std::string(config.status().message()));
  std::vector<const FieldDescriptor*> fields;
  config->GetReflection()->ListFields(*config, &fields);
  std::vector<CLI::ConfigItem> items;
  for (const FieldDescriptor* field : fields) {
    CLI::ConfigItem item;
    item.name = FlagName(field);
    const int count = field->is_repeated() ? config->GetReflection()->FieldSize(*config, field) : 1;
    for (int i = 0; i < count; ++i) item.inputs.push_back(ValueText(*config, field, i));
    items.push_back(std::move(item));
  }
  return items;
}

std::string DaemonConfigFormatter::to_config(const CLI::App* app, bool /*default_also*/,
                                             bool /*write_description*/,
                                             std::string /*prefix*/) const {
  std::string text;
  google::protobuf::TextFormat::PrintToString(DaemonConfigOf(*app), &text);
  return text;
}

DaemonConfig DaemonConfigOf(const CLI::App& app) {
  DaemonConfig config;
  const auto* descriptor = DaemonConfig::descriptor();
  for (const CLI::Option* option : app.get_options()) {
    if (option->count() == 0 || !option->get_configurable()) continue;
    const FieldDescriptor* field =
        descriptor->FindFieldByName(absl::StrReplaceAll(option->get_single_name(), {{"-", "_"}}));
    if (field != nullptr) SetField(config, field, option);
  }
  return config;
}

DaemonConfig EffectiveDaemonConfig(const DaemonFlags& flags) {
  const ServerOptions& options = flags.server;
  DaemonConfig config;
  config.set_db(options.db_path.empty() ? DefaultDatabasePath() : options.db_path);
  if (options.listen.empty()) {
    config.add_listen(DefaultServerAddress());
  } else {
    for (const std::string& address : options.listen) config.add_listen(address);
  }
  config.set_insecure(options.insecure);
  if (!options.tls_cert.empty()) config.set_tls_cert(options.tls_cert);
  if (!options.tls_key.empty()) config.set_tls_key(options.tls_key);
  if (!options.tls_client_ca.empty()) config.set_tls_client_ca(options.tls_client_ca);
  config.set_readers(options.readers);
  for (const std::string& dir : options.kernels_dirs) config.add_kernels(dir);
  if (!options.worker_path.empty()) config.set_worker(options.worker_path);
  if (!options.profile_worker_path.empty()) config.set_profile_worker(options.profile_worker_path);
  config.set_compile_workers(options.compile_workers);
  config.set_compile_memory_mb(options.compile_memory_mb);
  config.set_compile_ahead(options.compile_ahead);
  config.set_allow_unconfined_compiles(options.allow_unconfined_compiles);
  if (!options.gpus.empty()) config.set_gpus(options.gpus);
  config.set_variant_timeout(options.variant_timeout_s);
  if (!options.lease_dir.empty()) config.set_lease_dir(options.lease_dir);
  config.set_quiet_wait(options.quiet_wait_s);
  config.set_tune_on_miss_per_hour(options.tune_on_miss_per_hour);
  config.set_max_job_variants(options.max_job_variants);
  config.set_max_jobs_per_submitter(options.max_jobs_per_submitter);
  if (!options.auth.token_file.empty()) config.set_token_file(options.auth.token_file);
  for (const std::string& role : options.auth.peer_roles) config.add_peer_role(role);
  for (const std::string& role : options.auth.cert_roles) config.add_cert_role(role);
  if (!options.auth.anonymous_role.empty()) config.set_anonymous_role(options.auth.anonymous_role);
  if (!options.http_listen.empty()) config.set_http_listen(options.http_listen);
  for (const std::string& host : options.http_allowed_hosts) config.add_http_allow_host(host);
  if (!options.audit_log.empty()) config.set_audit_log(options.audit_log);
  if (!options.backup_dir.empty()) config.set_backup_dir(options.backup_dir);
  config.set_socket_mode(absl::StrFormat("%04o", options.socket_mode));
  if (!flags.log_level.empty()) config.set_log_level(flags.log_level);
  if (!flags.log_format.empty()) config.set_log_format(flags.log_format);
  config.set_health_interval(absl::ToDoubleSeconds(options.health_interval));
  return config;
}

std::string EffectiveConfigText(const DaemonFlags& flags) {
  const DaemonConfig config = EffectiveDaemonConfig(flags);
  const auto* reflection = config.GetReflection();
  std::string text =
      "# autotuned's settings in effect: the command line, the config file and the defaults.\n";
  const auto* descriptor = DaemonConfig::descriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    int count = 0;
    if (field->is_repeated()) {
      count = reflection->FieldSize(config, field);
    } else if (reflection->HasField(config, field)) {
      count = 1;
    }
    if (count == 0) absl::StrAppend(&text, "# ", field->name(), ": not set\n");
    for (int j = 0; j < count; ++j) {
      std::string value;
      google::protobuf::TextFormat::PrintFieldValueToString(config, field,
                                                            field->is_repeated() ? j : -1, &value);
      absl::StrAppend(&text, field->name(), ": ", value, "\n");
    }
  }
  return text;
}

std::string ConfigErrorText(const CLI::App& app, const CLI::ParseError& error,
                            const std::vector<std::string>& args) {
  const CLI::Option* config_option = app.get_config_ptr();
  const std::string file = config_option != nullptr && config_option->count() > 0
                               ? config_option->as<std::string>()
                               : "";
  if (file.empty()) return error.what();
  if (dynamic_cast<const CLI::ConfigError*>(&error) != nullptr) {
    return absl::StrCat("config file ", file, ": ", error.what());
  }
  // "--readers: Value 100 not in range 1 to 64": the value came from the
  // file when the command line does not name the flag.
  absl::string_view what = error.what();
  if (!absl::ConsumePrefix(&what, "--")) return error.what();
  const std::string flag(what.substr(0, what.find(':')));
  for (const std::string& arg : args) {
    if (arg == "--" + flag || absl::StartsWith(arg, "--" + flag + "=")) return error.what();
  }
  const std::string field = absl::StrReplaceAll(flag, {{"-", "_"}});
  if (DaemonConfig::descriptor()->FindFieldByName(field) == nullptr) return error.what();
  return absl::StrCat("config file ", file, ": ", field, ": ", error.what());
}

void AddDaemonFlags(CLI::App& app, DaemonFlags& flags) {
  ServerOptions& options = flags.server;
  app.config_formatter(std::make_shared<DaemonConfigFormatter>());
  app.set_config("--config", "",
                 "read options from FILE, protobuf text format with one field per flag "
                 "(proto/daemon_config.proto); flags given here win");
  app.add_flag("--print-config", flags.print_config,
               "print every setting in effect (flags, config file and defaults) as a config "
               "file, and exit")
      ->configurable(false);
  app.add_option("--db", options.db_path,
                 "SQLite database file (default " + DefaultDatabasePath() + ")");
  app.add_option("--listen", options.listen,
                 "address to serve, repeatable: unix:///path or host:port (default " +
                     DefaultServerAddress() + ")");
  app.add_flag("--insecure", options.insecure, "allow plaintext TCP on a loopback address");
  app.add_option("--tls-cert", options.tls_cert, "PEM certificate chain for TCP")
      ->check(CLI::ExistingFile);
  app.add_option("--tls-key", options.tls_key, "PEM private key for TCP")->check(CLI::ExistingFile);
  app.add_option("--tls-client-ca", options.tls_client_ca,
                 "PEM CA: require client certificates signed by it")
      ->check(CLI::ExistingFile);
  app.add_option("--readers", options.readers, "pooled database read connections")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--kernels", options.kernels_dirs,
                 "a folder of kernel families (*.textproto) to register at start-up besides the "
                 "built-in ones (repeatable); 'none' leaves the built-in ones out (they are in "
                 "../share/autotune/kernels beside autotuned, or the checkout's kernels/ for a "
                 "build-tree binary)");
  app.add_option("--worker", options.worker_path,
                 "the autotune-worker executable (default: beside autotuned)");
  app.add_option("--profile-worker", options.profile_worker_path,
                 "the program that validates and times kernels on the GPU, speaking the "
                 "worker protocol (default: --worker; a wrapper that runs it under a profiler, "
                 "say)")
      ->check(CLI::ExistingFile);
  app.add_option("--compile-workers", options.compile_workers,
                 "compile worker processes (default: one per core)")
      ->check(CLI::Range(0, 1024));
  app.add_option("--compile-memory-mb", options.compile_memory_mb,
                 "each compile worker's data memory in MiB; a compile that needs more fails "
                 "(0 = no cap)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--compile-ahead", options.compile_ahead,
                 "while a searched job measures a round, compile up to this many times the "
                 "round's size of the variants its search expects next (0 = compile each "
                 "round only when it comes)")
      ->check(CLI::Range(0, 16))
      ->capture_default_str();
  app.add_flag("--allow-unconfined-compiles", options.allow_unconfined_compiles,
               "compile family sources even where the kernel cannot confine the compile workers "
               "(Landlock): a source may then read any file this daemon's user can");
  app.add_option("--gpus", options.gpus,
                 "GPUs to validate and time kernels on: ordinals like 0,1; 'none' for "
                 "compile-only service (default: all)");
  app.add_option("--variant-timeout", options.variant_timeout_s,
                 absl::StrCat("seconds one kernel launch may run before its variant is TIMEOUT "
                              "(default ",
                              kernels::kDefaultLaunchTimeoutS, "; a job may set its own)"))
      ->check(CLI::PositiveNumber);
  app.add_option("--lease-dir", options.lease_dir,
                 "directory of the host-wide GPU leases every autotune daemon and benchmark "
                 "honours; 'none' to take none")
      ->capture_default_str();
  app.add_option("--quiet-wait", options.quiet_wait_s,
                 "seconds the serial phase waits for a GPU without other compute processes "
                 "before the problem fails (a job may set its own; --force measures anyway)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--tune-on-miss-per-hour", options.tune_on_miss_per_hour,
                 "problems a RequestTuning call (tune-on-miss) may queue per hour, over all "
                 "clients; 0 turns it off")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--max-job-variants", options.max_job_variants,
                 "most variants one job may plan; a larger one is refused (0 = no limit)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--max-jobs-per-submitter", options.max_jobs_per_submitter,
                 "most unfinished jobs one caller (token, uid, certificate) may have "
                 "(0 = no limit)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--token-file", options.auth.token_file,
                 "bearer tokens, one '<role> <id> sha256:<hex> [expires=<RFC 3339>]' per line "
                 "(`autotune token new` makes one); read again on SIGHUP")
      ->check(CLI::ExistingFile);
  app.add_option("--peer-role", options.auth.peer_roles,
                 "a role for Unix-socket peers: uid:N=ROLE or gid:N=ROLE (repeatable; the "
                 "daemon's own uid is admin unless named)");
  app.add_option("--cert-role", options.auth.cert_roles,
                 "a role for TLS client certificates by common name: NAME=ROLE (repeatable)");
  app.add_option("--anonymous-role", options.auth.anonymous_role,
                 "the role of callers with no token, mapped peer or mapped certificate")
      ->check(CLI::IsMember({"none", "reader", "tuner", "admin"}))
      ->capture_default_str();
  app.add_option("--http-listen,--metrics-listen", options.http_listen,
                 "serve HTTP at host:port: Prometheus metrics (GET /metrics), the admin page "
                 "(GET /admin) and its JSON API (/api/, with roles); off by default");
  app.add_option("--http-allow-host", options.http_allowed_hosts,
                 "a name the HTTP port answers in the Host header besides localhost, 127.0.0.1, "
                 "[::1] and the --http-listen host (repeatable); other Host names get 403");
  app.add_option("--audit-log", options.audit_log,
                 "JSON lines, one per mutating call (default: audit.log beside the database; "
                 "'none' for no audit log)");
  app.add_option("--backup-dir", options.backup_dir,
                 "the folder `autotune backup` writes into, by file name (absolute; created "
                 "0700; must be the daemon user's, closed to others' writes); without it "
                 "backups are refused");
  app.add_option_function<std::string>(
         "--socket-mode",
         [&options](const std::string& text) {
           options.socket_mode = static_cast<unsigned>(std::stoul(text, nullptr, 8));
         },
         absl::StrFormat("permissions of Unix sockets, octal (default %04o; 0660 lets the group "
                         "connect)",
                         kDefaultSocketMode))
      ->check([](const std::string& text) -> std::string {
        return OctalMode(text) ? "" : "expected an octal mode such as 0600 or 0660";
      });
  app.add_option_function<double>(
         "--health-interval",
         [&options](double seconds) { options.health_interval = absl::Seconds(seconds); },
         absl::StrCat("seconds between checks that the database answers; health is NOT_SERVING "
                      "while it does not (default ",
                      kDefaultHealthIntervalS, ")"))
      ->check(CLI::PositiveNumber);
  app.add_option("--log-level", flags.log_level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
  app.add_option("--log-format", flags.log_format,
                 "text, or json: one JSON object per line (time, level, message), the output "
                 "of worker processes included")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
}

}  // namespace autotune::service
