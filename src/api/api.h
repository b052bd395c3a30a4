// HTTP/JSON API of trainerd: translates requests into service calls, and back.
#pragma once

namespace trainer::api {

// Entry point of the trainerd executable; returns the process exit code.
int trainerd_main(int argc, char** argv);

}  // namespace trainer::api
