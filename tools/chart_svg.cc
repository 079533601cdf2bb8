#include "tools/chart_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

namespace kv0::tools {
namespace {

constexpr int kLeft = 80, kRight = 24, kTop = 40, kBottom = 48;  // margins around the plot
constexpr int kLegendRow = 20;
const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                               "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

// The length of the valid UTF-8 sequence at text[i], or 0.
size_t Utf8Length(std::string_view text, size_t i) {
  auto c = static_cast<unsigned char>(text[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) return 0;
  }
  return n;
}

std::string Number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string Coord(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

// Tick positions across [lo, hi]: multiples of 1, 2 or 5 times a power of
// ten, about five of them.
std::vector<double> Ticks(double lo, double hi) {
  double span = hi - lo;
  double raw = span / 5;
  double magnitude = std::pow(10, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * magnitude >= raw) {
      step = m * magnitude;
      break;
    }
  }
  std::vector<double> out;
  const double first = std::ceil(lo / step) * step;
  for (int k = 0; k < 20; ++k) {  // by index: t += step can stall on large t
    double t = first + k * step;
    if (t > hi + step * 1e-9) break;
    out.push_back(std::abs(t) < step * 1e-9 ? 0 : t);
  }
  return out;
}

// A bucket's drawn points, in step order: first, min, max, last (finite
// ones only, each step once).
std::vector<std::pair<int64_t, double>> BucketPoints(const tracking::Bucket& b) {
  std::vector<std::pair<int64_t, double>> p = {{b.first_step, b.first}, {b.last_step, b.last}};
  if (!std::isnan(b.min)) p.emplace_back(b.min_step, b.min);
  if (!std::isnan(b.max)) p.emplace_back(b.max_step, b.max);
  std::erase_if(p, [](const auto& x) { return !std::isfinite(x.second); });
  std::stable_sort(p.begin(), p.end(),
                   [](const auto& a, const auto& c) { return a.first < c.first; });
  p.erase(std::unique(p.begin(), p.end()), p.end());
  return p;
}

// [lo, hi] widened by 5% (or to a unit span around a single value).
std::pair<double, double> Padded(double lo, double hi) {
  if (lo > hi) return {0, 1};
  if (lo == hi) {
    double d = lo == 0 ? 1 : std::abs(lo) * 0.1;
    return {lo - d, hi + d};
  }
  double pad = (hi - lo) * 0.05;
  return {lo - pad, hi + pad};
}

}  // namespace

std::string EscapeXml(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    size_t n = Utf8Length(text, i);
    char c = text[i];
    if (n == 0 || (n == 1 && static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n')) {
      out += '?';
      i += std::max<size_t>(n, 1);
      continue;
    }
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.append(text.substr(i, n));
    }
    i += n;
  }
  return out;
}

std::string RenderSvg(const Chart& chart, int width, int height) {
  std::vector<std::vector<std::pair<int64_t, double>>> lines;
  double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo, y_lo = x_lo, y_hi = -x_lo;
  for (const auto& line : chart.lines) {
    std::vector<std::pair<int64_t, double>> points;
    for (const auto& b : line.buckets) {
      for (const auto& p : BucketPoints(b)) points.push_back(p);
    }
    for (const auto& [x, y] : points) {
      x_lo = std::min(x_lo, double(x));
      x_hi = std::max(x_hi, double(x));
      y_lo = std::min(y_lo, y);
      y_hi = std::max(y_hi, y);
    }
    lines.push_back(std::move(points));
  }
  auto [x0, x1] = Padded(x_lo, x_hi);
  auto [y0, y1] = Padded(y_lo, y_hi);
  const double plot_w = width - kLeft - kRight, plot_h = height - kTop - kBottom;
  auto px = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * plot_w; };
  auto py = [&](double y) { return kTop + (1 - (y - y0) / (y1 - y0)) * plot_h; };
  const int total_h = height + kLegendRow * static_cast<int>(chart.lines.size()) + 8;

  std::string svg;
  svg += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(width) +
         "\" height=\"" + std::to_string(total_h) + "\" viewBox=\"0 0 " + std::to_string(width) +
         " " + std::to_string(total_h) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += "<text x=\"" + std::to_string(width / 2) +
         "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" + EscapeXml(chart.title) +
         "</text>\n";
  // Axes, grid and ticks.
  svg += "<g stroke=\"#ccc\" stroke-width=\"1\">\n";
  for (double t : Ticks(x0, x1)) {
    svg += "<line x1=\"" + Coord(px(t)) + "\" y1=\"" + std::to_string(kTop) + "\" x2=\"" +
           Coord(px(t)) + "\" y2=\"" + std::to_string(height - kBottom) + "\"/>\n";
  }
  for (double t : Ticks(y0, y1)) {
    svg += "<line x1=\"" + std::to_string(kLeft) + "\" y1=\"" + Coord(py(t)) + "\" x2=\"" +
           std::to_string(width - kRight) + "\" y2=\"" + Coord(py(t)) + "\"/>\n";
  }
  svg += "</g>\n<g fill=\"#333\">\n";
  for (double t : Ticks(x0, x1)) {
    svg += "<text class=\"tick\" x=\"" + Coord(px(t)) + "\" y=\"" +
           std::to_string(height - kBottom + 16) + "\" text-anchor=\"middle\">" + Number(t) +
           "</text>\n";
  }
  for (double t : Ticks(y0, y1)) {
    svg += "<text class=\"tick\" x=\"" + std::to_string(kLeft - 6) + "\" y=\"" + Coord(py(t) + 4) +
           "\" text-anchor=\"end\">" + Number(t) + "</text>\n";
  }
  svg += "<text x=\"" + Coord(kLeft + plot_w / 2) + "\" y=\"" +
         std::to_string(height - kBottom + 36) + "\" text-anchor=\"middle\">" +
         EscapeXml(chart.x_label) + "</text>\n";
  svg += "<text x=\"16\" y=\"" + Coord(kTop + plot_h / 2) +
         "\" text-anchor=\"middle\" transform=\"rotate(-90 16 " + Coord(kTop + plot_h / 2) +
         ")\">" + EscapeXml(chart.y_label) + "</text>\n";
  svg += "</g>\n";
  svg += "<rect x=\"" + std::to_string(kLeft) + "\" y=\"" + std::to_string(kTop) + "\" width=\"" +
         Coord(plot_w) + "\" height=\"" + Coord(plot_h) + "\" fill=\"none\" stroke=\"#333\"/>\n";
  // The lines, then the legend.
  for (size_t i = 0; i < lines.size(); ++i) {
    const char* color = kColors[i % std::size(kColors)];
    svg += "<polyline class=\"series\" fill=\"none\" stroke=\"" + std::string(color) +
           "\" stroke-width=\"1.2\" points=\"";
    for (size_t k = 0; k < lines[i].size(); ++k) {
      svg += (k ? " " : "") + Coord(px(double(lines[i][k].first))) + "," +
             Coord(py(lines[i][k].second));
    }
    svg += "\"/>\n";
  }
  for (size_t i = 0; i < chart.lines.size(); ++i) {
    int y = height + kLegendRow * static_cast<int>(i) + 4;
    const char* color = kColors[i % std::size(kColors)];
    svg += "<rect x=\"" + std::to_string(kLeft) + "\" y=\"" + std::to_string(y) +
           "\" width=\"14\" height=\"10\" fill=\"" + color + "\"/>\n";
    svg += "<text class=\"legend\" x=\"" + std::to_string(kLeft + 20) + "\" y=\"" +
           std::to_string(y + 10) + "\">" + EscapeXml(chart.lines[i].label) + "</text>\n";
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace kv0::tools
