// trainerd: the service's executable; its wiring is in trainerd.cpp.
namespace trainer::apps {
int trainerd_main(int argc, char** argv);
}

int main(int argc, char** argv) { return trainer::apps::trainerd_main(argc, argv); }
