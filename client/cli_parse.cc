#include "client/cli_parse.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "common/status_macros.h"

namespace gpucompute::client {
namespace {

absl::StatusOr<double> ParseFiniteDouble(absl::string_view text, absl::string_view what) {
  double value;
  if (!absl::SimpleAtod(absl::StripAsciiWhitespace(text), &value) || !std::isfinite(value)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": '", text, "' is not a finite number"));
  }
  return value;
}

}  // namespace

absl::Status UsageError(absl::string_view message) {
  absl::Status status = absl::InvalidArgumentError(message);
  status.SetPayload(kUsageErrorPayload, absl::Cord());
  return status;
}

bool IsUsageError(const absl::Status& status) {
  return status.GetPayload(kUsageErrorPayload).has_value();
}

absl::StatusOr<CommandLine> ParseCommandLine(
    int argc, char** argv, const std::function<bool(absl::string_view)>& is_known_flag,
    std::span<const absl::string_view> repeatable_flags) {
  const auto find_flag = [&is_known_flag](const std::string& name) {
    return is_known_flag(name) ? absl::FindCommandLineFlag(name) : nullptr;
  };
  CommandLine line;
  // Values so far of repeatable flags.
  std::map<std::string, std::string> accumulated;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") {
      line.positional.insert(line.positional.end(), argv + i + 1, argv + argc);
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      line.positional.emplace_back(arg);
      continue;
    }
    absl::ConsumePrefix(&arg, "-");
    absl::ConsumePrefix(&arg, "-");
    const size_t equals = arg.find('=');
    std::string name(arg.substr(0, equals));
    std::optional<std::string> value;
    if (equals != absl::string_view::npos) value = std::string(arg.substr(equals + 1));
    if (name == "help" || name == "h") {
      line.help = true;
      continue;
    }
    if (name == "version") {
      line.version = true;
      continue;
    }
    absl::CommandLineFlag* flag = find_flag(name);
    if (flag == nullptr && absl::StartsWith(name, "no") && !value.has_value()) {
      const std::string positive = name.substr(2);
      absl::CommandLineFlag* negated = find_flag(positive);
      if (negated != nullptr && negated->IsOfType<bool>()) {
        flag = negated;
        name = positive;
        value = "false";
      }
    }
    if (flag == nullptr) return UsageError(absl::StrCat("unknown flag --", name));
    if (!value.has_value()) {
      if (flag->IsOfType<bool>()) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return UsageError(absl::StrCat("--", name, " needs a value"));
      }
    }
    const bool repeatable =
        std::find(repeatable_flags.begin(), repeatable_flags.end(), name) != repeatable_flags.end();
    if (line.given.contains(name)) {
      if (!repeatable) return UsageError(absl::StrCat("--", name, " is given twice"));
      value = absl::StrCat(accumulated[name], ";", *value);
    }
    if (repeatable) accumulated[name] = *value;
    // A bare number of seconds is a duration too ("--timeout=30" is 30 s).
    double seconds = 0;
    if (flag->IsOfType<absl::Duration>() && absl::SimpleAtod(*value, &seconds)) {
      value = absl::StrCat(*value, "s");
    }
    std::string error;
    if (!flag->ParseFrom(*value, &error)) {
      return UsageError(absl::StrCat(
          "invalid value for --", name, ": ", error,
          flag->IsOfType<absl::Duration>()
              ? " (a duration: seconds, or a number with its unit: 500ms, 30s, 2m, 1h; inf)"
              : ""));
    }
    line.given.insert(name);
  }
  return line;
}

absl::StatusOr<Linspace> ParseLinspace(absl::string_view text, absl::string_view flag) {
  const std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  if (parts.size() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "='", text, "': expected START:STOP:COUNT"));
  }
  Linspace linspace;
  GC_ASSIGN_OR_RETURN(linspace.start,
                      ParseFiniteDouble(parts[0], absl::StrCat("--", flag, " START")));
  GC_ASSIGN_OR_RETURN(linspace.stop,
                      ParseFiniteDouble(parts[1], absl::StrCat("--", flag, " STOP")));
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(parts[2]), &linspace.count) ||
      linspace.count == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " COUNT: '", parts[2], "' is not a positive integer"));
  }
  return linspace;
}

absl::StatusOr<std::vector<v1::GeoPoint>> ParseGeoPoints(absl::string_view text,
                                                         absl::string_view flag) {
  std::vector<v1::GeoPoint> points;
  for (absl::string_view item : absl::StrSplit(text, ';', absl::SkipWhitespace())) {
    const std::vector<absl::string_view> parts = absl::StrSplit(item, ',');
    if (parts.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": '", item, "' is not LAT,LON"));
    }
    GC_ASSIGN_OR_RETURN(const double lat,
                        ParseFiniteDouble(parts[0], absl::StrCat("--", flag, " LAT")));
    GC_ASSIGN_OR_RETURN(const double lon,
                        ParseFiniteDouble(parts[1], absl::StrCat("--", flag, " LON")));
    if (lat < -90 || lat > 90) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": latitude ", lat, " is outside [-90, 90]"));
    }
    v1::GeoPoint& point = points.emplace_back();
    point.set_lat(lat);
    point.set_lon(lon);
  }
  if (points.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": no LAT,LON points given"));
  }
  return points;
}

absl::StatusOr<v1::Norm> ParseNorm(absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "sum") return v1::NORM_SUM;
  if (lower == "l1") return v1::NORM_L1;
  if (lower == "l2") return v1::NORM_L2;
  if (lower == "max_abs") return v1::NORM_MAX_ABS;
  return absl::InvalidArgumentError(
      absl::StrCat("--norm='", text, "': expected sum, l1, l2 or max_abs"));
}

absl::StatusOr<v1::LombScargleNormalization> ParseLombScargleNormalization(absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "power") return v1::LOMB_SCARGLE_NORMALIZATION_POWER;
  if (lower == "normalize") return v1::LOMB_SCARGLE_NORMALIZATION_NORMALIZE;
  if (lower == "amplitude") return v1::LOMB_SCARGLE_NORMALIZATION_AMPLITUDE;
  return absl::InvalidArgumentError(
      absl::StrCat("--normalization='", text, "': expected power, normalize or amplitude"));
}

absl::StatusOr<v1::LombScargleMethod> ParseLombScargleMethod(absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "auto") return v1::LOMB_SCARGLE_METHOD_AUTO;
  if (lower == "direct") return v1::LOMB_SCARGLE_METHOD_DIRECT;
  if (lower == "nufft") return v1::LOMB_SCARGLE_METHOD_NUFFT;
  return absl::InvalidArgumentError(
      absl::StrCat("--method='", text, "': expected auto, direct or nufft"));
}

absl::StatusOr<OperandSpec> ParseOperandSpec(absl::string_view text, absl::string_view flag) {
  if (text.empty()) return absl::InvalidArgumentError(absl::StrCat("--", flag, " is empty"));
  absl::string_view id = text;
  if (absl::ConsumePrefix(&id, "buffer:")) {
    if (id.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, "=buffer: needs a buffer id"));
    }
    return OperandSpec{OperandSpec::Kind::kBuffer, std::string(id)};
  }
  return OperandSpec{OperandSpec::Kind::kFile, std::string(text)};
}

absl::string_view BenchOpName(BenchOp op) {
  switch (op) {
    case BenchOp::kNormalize:
      return "normalize";
    case BenchOp::kHaversine:
      return "haversine";
    case BenchOp::kDiscount:
      return "discount";
    case BenchOp::kLombScargle:
      return "lombscargle";
    case BenchOp::kHealth:
      return "health";
  }
  return "unknown";
}

absl::StatusOr<std::vector<MixEntry>> ParseMix(absl::string_view text) {
  constexpr BenchOp kOps[] = {BenchOp::kNormalize, BenchOp::kHaversine, BenchOp::kDiscount,
                              BenchOp::kLombScargle, BenchOp::kHealth};
  std::vector<MixEntry> mix;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    const std::pair<absl::string_view, absl::string_view> name_weight =
        absl::StrSplit(absl::StripAsciiWhitespace(item), absl::MaxSplits(':', 1));
    MixEntry entry;
    bool known = false;
    for (BenchOp op : kOps) {
      if (name_weight.first == BenchOpName(op)) {
        entry.op = op;
        known = true;
      }
    }
    if (!known) {
      return absl::InvalidArgumentError(
          absl::StrCat("--mix: unknown operation '", name_weight.first,
                       "' (expected normalize, haversine, discount, lombscargle, health)"));
    }
    for (const MixEntry& seen : mix) {
      if (seen.op == entry.op) {
        return absl::InvalidArgumentError(
            absl::StrCat("--mix: '", name_weight.first, "' is listed twice"));
      }
    }
    if (!name_weight.second.empty() && !absl::SimpleAtoi(name_weight.second, &entry.weight)) {
      return absl::InvalidArgumentError(absl::StrCat("--mix: weight '", name_weight.second, "' of ",
                                                     name_weight.first,
                                                     " is not a non-negative integer"));
    }
    mix.push_back(entry);
  }
  std::erase_if(mix, [](const MixEntry& entry) { return entry.weight == 0; });
  if (mix.empty()) {
    return absl::InvalidArgumentError("--mix: no operation with a weight above 0");
  }
  return mix;
}

}  // namespace gpucompute::client
