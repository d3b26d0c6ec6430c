#include "client/cli_parse.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

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

absl::StatusOr<Linspace> ParseLinspace(absl::string_view text, absl::string_view flag) {
  const std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  if (parts.size() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "='", text, "': expected START:STOP:COUNT"));
  }
  Linspace linspace;
  absl::StatusOr<double> start = ParseFiniteDouble(parts[0], absl::StrCat("--", flag, " START"));
  if (!start.ok()) return start.status();
  absl::StatusOr<double> stop = ParseFiniteDouble(parts[1], absl::StrCat("--", flag, " STOP"));
  if (!stop.ok()) return stop.status();
  linspace.start = *start;
  linspace.stop = *stop;
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
    absl::StatusOr<double> lat = ParseFiniteDouble(parts[0], absl::StrCat("--", flag, " LAT"));
    if (!lat.ok()) return lat.status();
    absl::StatusOr<double> lon = ParseFiniteDouble(parts[1], absl::StrCat("--", flag, " LON"));
    if (!lon.ok()) return lon.status();
    if (*lat < -90 || *lat > 90) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": latitude ", *lat, " is outside [-90, 90]"));
    }
    v1::GeoPoint& point = points.emplace_back();
    point.set_lat(*lat);
    point.set_lon(*lon);
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
  }
  return "unknown";
}

absl::StatusOr<std::vector<MixEntry>> ParseMix(absl::string_view text) {
  constexpr BenchOp kOps[] = {BenchOp::kNormalize, BenchOp::kHaversine, BenchOp::kDiscount,
                              BenchOp::kLombScargle};
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
                       "' (expected normalize, haversine, discount, lombscargle)"));
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
