// Line charts of downsampled series as SVG documents, for `kv0 plot`.
//
// Each line is drawn through the points a chart needs to look exactly like
// the full series at its width: per bucket its first, minimum, maximum and
// last points, in step order (kv0/tracking.h, Bucket). Non-finite values
// are not drawn. Every text that comes from the user (run and metric names,
// the title) is escaped, so no name can change the document's structure.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kv0/tracking.h"

namespace kv0::tools {

struct ChartLine {
  std::string label;
  std::vector<tracking::Bucket> buckets;  // as ReadDownsampled returns them
};

struct Chart {
  std::string title;
  std::string x_label = "step";
  std::string y_label;
  std::vector<ChartLine> lines;
};

// A standalone SVG document: axes with ticks, one polyline per line, a
// legend below. width and height are the plot's, in pixels, before the
// legend's rows.
std::string RenderSvg(const Chart& chart, int width = 960, int height = 480);

// Text for SVG character data and attribute values: & < > " ' escaped, and
// bytes that XML 1.0 does not allow (control characters) replaced by '?'.
std::string EscapeXml(std::string_view text);

}  // namespace kv0::tools
