// A shared library named like a plugin but exporting no descriptor.
extern "C" int masque_test_not_a_plugin() {
  return 42;
}
