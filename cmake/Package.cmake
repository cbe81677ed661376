# The Debian package (issue 20): `cpack -G DEB` in the build directory (after the build) writes
# noded_<version>_<arch>.deb with noded, nodectl, loadgen (stripped), the systemd unit
# (lib/systemd/system/noded.service), the example config (/etc/noded/noded.conf, a conffile),
# README.md, and maintainer scripts that create the noded user and /var/lib/noded
# (tools/packaging/). Dependencies come from dpkg-shlibdeps.
install(FILES ${PROJECT_SOURCE_DIR}/tools/packaging/noded.service DESTINATION /lib/systemd/system)
install(FILES ${PROJECT_SOURCE_DIR}/tools/packaging/noded.conf DESTINATION /etc/noded)
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION share/doc/noded)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME noded)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "multi-partition PBFT consensus node with flow control")
set(CPACK_PACKAGE_CONTACT "noded maintainers <noded@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser")
set(CPACK_DEBIAN_COMPRESSION_TYPE gzip)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/tools/packaging/postinst ${PROJECT_SOURCE_DIR}/tools/packaging/prerm
    ${PROJECT_SOURCE_DIR}/tools/packaging/postrm ${PROJECT_SOURCE_DIR}/tools/packaging/conffiles)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
