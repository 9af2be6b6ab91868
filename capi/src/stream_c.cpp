// qload_stream_*: the session's pulled stream (session/pull_stream.hpp) behind the C ABI.
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "c_handles.hpp"
#include "c_status.hpp"
#include "dlpack_bridge.hpp"
#include "qload/qload.h"
#include "qload/session/pull_stream.hpp"
#include "qload/session/report.hpp"

using namespace qload;
using capi::failed;
using capi::guarded;

struct qload_stream {
  std::unique_ptr<session::PullStream> stream;
  std::shared_ptr<const session::StreamedTensor> current;  // what the last info describes
  std::vector<std::int64_t> shape;                         // the last info's shape
  std::string report_json;                                 // once the stream has ended
};

extern "C" {

qload_status qload_stream_open(qload_session* s, qload_stream** out) {
  return guarded([&] {
    if (s == nullptr || out == nullptr)
      return failed(QLOAD_ERR_INVALID_ARGUMENT, "qload_stream_open: session and out must not be NULL");
    if (!s->request) return failed(QLOAD_ERR_INVALID_ARGUMENT, "qload_stream_open: this session has already loaded");
    auto request = std::make_shared<session::LoadRequest>(std::move(*s->request));
    s->request.reset();
    auto handle = std::make_unique<qload_stream>();
    handle->stream = std::make_unique<session::PullStream>(
        [request](const session::LoadHooks& hooks) { return session::load(std::move(*request), hooks); });
    *out = handle.release();
    return QLOAD_OK;
  });
}

qload_status qload_stream_next(qload_stream* stream, qload_tensor_info* info, DLManagedTensorVersioned** tensor) {
  return guarded([&] {
    if (stream == nullptr || info == nullptr)
      return failed(QLOAD_ERR_INVALID_ARGUMENT, "qload_stream_next: stream and info must not be NULL");
    if (tensor != nullptr) *tensor = nullptr;
    *info = qload_tensor_info{};
    stream->current.reset();
    Result<session::StreamItem> item = stream->stream->next();
    if (!item) return failed(item.error());
    if (std::holds_alternative<session::StreamEnd>(*item)) {
      if (const auto report = stream->stream->report())
        stream->report_json =
            session::load_report_json(*report).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      return QLOAD_OK;
    }
    stream->current = std::move(std::get<std::unique_ptr<session::StreamedTensor>>(*item));
    const scheduler::DeviceTensor& t = stream->current->view;
    stream->shape = capi::shape_of(t);
    *info = capi::info_of(t, stream->shape);
    if (tensor != nullptr && capi::dlpack_dtype(t.dtype)) {
      auto exported = capi::export_dlpack(t, stream->current, stream->shape);
      if (!exported) return failed(exported.error());
      *tensor = *exported;
    }
    return QLOAD_OK;
  });
}

qload_status qload_stream_report_json(qload_stream* stream, const char** out) {
  return guarded([&] {
    if (stream == nullptr || out == nullptr)
      return failed(QLOAD_ERR_INVALID_ARGUMENT, "qload_stream_report_json: stream and out must not be NULL");
    if (stream->report_json.empty())
      return failed(QLOAD_ERR_INVALID_ARGUMENT,
                    "qload_stream_report_json: the stream has not ended (or its load failed): no report yet");
    *out = stream->report_json.c_str();
    return QLOAD_OK;
  });
}

void qload_stream_free(qload_stream* stream) {
  delete stream;
}

}  // extern "C"
