// Repo.search_runs' native half: the query in, the page out as an Arrow
// stream (RunPageToArrow) with the count matched and the next page's token.

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "arrow_capsule.h"
#include "tracking_handles.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace kv0::python {

void BindRunSearch(nb::class_<PyRepo>& repo) {
  repo.def(
      "_search_runs",
      [](PyRepo& self, std::string filter, std::vector<std::string> order_by, int64_t limit,
         std::optional<std::string> page_token, std::optional<std::vector<std::string>> columns) {
        if (limit < 1) {
          throw Error(Code::kInvalidArgument,
                      "limit must be at least 1, not " + std::to_string(limit));
        }
        tr::RunQuery query;
        query.filter = std::move(filter);
        query.order_by = std::move(order_by);
        query.limit = static_cast<size_t>(limit);
        query.page_token = page_token.value_or("");
        query.columns = std::move(columns);
        tr::RunPage page;
        arrow::OwnedStream stream;
        {
          nb::gil_scoped_release release;
          page = self.repo().SearchRuns(query);
          tr::RunPageToArrow(page, stream.get());
        }
        nb::object token = page.next_page_token.empty()
                               ? nb::none()
                               : nb::object(nb::str(page.next_page_token.c_str()));
        return nb::make_tuple(ExportStream(std::move(stream)), page.matched, token);
      },
      "filter"_a, "order_by"_a, "limit"_a, "page_token"_a.none(), "columns"_a.none(),
      nb::sig("def _search_runs(self, filter: str, order_by: list[str], limit: int, "
              "page_token: str | None, columns: list[str] | None) -> "
              "tuple[kv0._kv0.ArrowStream, int, str | None]"),
      "The query behind Repo.search_runs.");
}

}  // namespace kv0::python
