// relay() of relay.h.
#include "http/relay.h"

#include <string>
#include <string_view>
#include <utility>

namespace trainer::http {

Stream relay(HttpRequest call, std::function<Response(const HttpResponse&)> unreachable,
             std::function<void(const HttpResponse&)> done) {
  Stream s;
  s.head.content_type = "text/event-stream";
  s.head.headers = {{"Cache-Control", "no-cache"}};
  s.produce = [call = std::move(call), unreachable = std::move(unreachable),
               done = std::move(done)](StreamWriter& writer) mutable {
    bool streaming = false;
    std::string whole;
    auto observe = std::move(call.on_body);
    call.on_body = [&](int status, std::string_view bytes) {
      if (status != 200) {
        whole.append(bytes);
        return true;
      }
      streaming = true;
      return (!observe || observe(status, bytes)) && writer.write(bytes);
    };
    call.keep_going = [&writer] { return writer.alive(); };
    HttpResponse answer = http_call(call);
    if (done) done(answer);
    if (streaming || answer.stopped) return;  // streamed (to its end or until the client went)
    if (answer.failure != HttpFailure::kNone) return writer.answer(unreachable(answer));
    Response r;
    r.status = answer.status;
    r.body = std::move(whole);
    writer.answer(std::move(r));
  };
  return s;
}

}  // namespace trainer::http
