# The C++ worker runtime as an installable shared library: the Dispatcher and its pieces
# (src/client), the PostgreSQL store on libpq, core and the store seam (src/store), with
# their headers and relaybus-client.pc. Included by the Makefile; needs CLIENT_SRCS,
# CLIENT_CXXFLAGS and RELAYBUS_VERSION from it.
#   make client-library      lib/librelaybus_client.so.$(RELAYBUS_VERSION)
#   make client-install      installs it under PREFIX (default /usr/local; the library in
#                            LIBDIR, default PREFIX/lib); DESTDIR works
#   make client-uninstall    removes what client-install installed
# `make install` runs client-install too wherever libpq's headers are installed.

PREFIX ?= /usr/local
# Where the library and relaybus-client.pc go; debian/rules sets the multiarch directory
# (/usr/lib/x86_64-linux-gnu), which the dynamic linker and pkg-config search too.
LIBDIR ?= $(PREFIX)/lib
# Before 1.0 a minor version may change the ABI, so the soname carries major.minor.
RUNTIME_SOVERSION = $(word 1,$(subst ., ,$(RELAYBUS_VERSION))).$(word 2,$(subst ., ,$(RELAYBUS_VERSION)))
RUNTIME_SONAME = librelaybus_client.so.$(RUNTIME_SOVERSION)
RUNTIME_LIB = lib/librelaybus_client.so.$(RELAYBUS_VERSION)
# Objects apart from the extension's (PGXS builds src/core/*.o without -fPIC guarantees and
# with the server's flags) and from the CLI's.
RUNTIME_OBJS = $(patsubst src/%.cpp,build/client/%.o,$(CLIENT_SRCS))
# The headers a program using the runtime includes, as <relaybus/DIR/NAME.hpp>. Every
# include among them is relative, so nothing but -I$(PREFIX)/include is needed.
RUNTIME_HDRS = $(wildcard src/client/*.hpp src/store/*.hpp src/core/*.hpp)

build/client/%.o: src/%.cpp | check-core
	@mkdir -p $(dir $@)
	$(CXX) $(CLIENT_CXXFLAGS) -fPIC -MMD -MP -c -o $@ $<
-include $(RUNTIME_OBJS:.o=.d)

# Only the runtime's own symbols are exported by name (relaybus::); libpq stays a
# dependency of the library, not of the programs linking it.
$(RUNTIME_LIB): $(RUNTIME_OBJS)
	@mkdir -p lib
	$(CXX) -shared -Wl,-soname,$(RUNTIME_SONAME) -o $@ $^ -lpq -pthread $(CLIENT_EXTRA_LDFLAGS)
	ln -sf $(notdir $@) lib/$(RUNTIME_SONAME)
	ln -sf $(RUNTIME_SONAME) lib/librelaybus_client.so

.PHONY: client-library client-install client-uninstall
client-library: $(RUNTIME_LIB)

client-install: $(RUNTIME_LIB)
	install -d $(DESTDIR)$(LIBDIR)/pkgconfig $(addprefix $(DESTDIR)$(PREFIX)/include/relaybus/,client core store)
	install -m 755 $(RUNTIME_LIB) $(DESTDIR)$(LIBDIR)/
	ln -sf $(notdir $(RUNTIME_LIB)) $(DESTDIR)$(LIBDIR)/$(RUNTIME_SONAME)
	ln -sf $(RUNTIME_SONAME) $(DESTDIR)$(LIBDIR)/librelaybus_client.so
	install -m 644 $(filter src/client/%,$(RUNTIME_HDRS)) $(DESTDIR)$(PREFIX)/include/relaybus/client/
	install -m 644 $(filter src/core/%,$(RUNTIME_HDRS)) $(DESTDIR)$(PREFIX)/include/relaybus/core/
	install -m 644 $(filter src/store/%,$(RUNTIME_HDRS)) $(DESTDIR)$(PREFIX)/include/relaybus/store/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@VERSION@|$(RELAYBUS_VERSION)|' relaybus-client.pc.in \
	  > $(DESTDIR)$(LIBDIR)/pkgconfig/relaybus-client.pc
# The dynamic linker's cache, so programs find the library in PREFIX/lib without
# LD_LIBRARY_PATH; only for a real install by root (not into a DESTDIR staging tree).
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then ldconfig; fi

client-uninstall:
# Only this version's files: another version's library may still serve programs linked to
# it. The development link goes only if it points at this version.
	rm -f $(DESTDIR)$(LIBDIR)/$(notdir $(RUNTIME_LIB)) $(DESTDIR)$(LIBDIR)/$(RUNTIME_SONAME)
	@if [ "$$(readlink $(DESTDIR)$(LIBDIR)/librelaybus_client.so 2>/dev/null)" = $(RUNTIME_SONAME) ]; then \
	  rm -f $(DESTDIR)$(LIBDIR)/librelaybus_client.so $(DESTDIR)$(LIBDIR)/pkgconfig/relaybus-client.pc; fi
	rm -rf $(DESTDIR)$(PREFIX)/include/relaybus/client
# core/ and store/ are shared with the MongoDB store's headers (mongo-install).
	@if [ ! -e $(DESTDIR)$(PREFIX)/lib/pkgconfig/relaybus-mongo.pc ]; then \
	  rm -rf $(DESTDIR)$(PREFIX)/include/relaybus/core $(DESTDIR)$(PREFIX)/include/relaybus/store; fi
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then ldconfig; fi
