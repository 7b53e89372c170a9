"""Apache Kafka's jars, resolved from Maven Central with Maven and cached outside the repository.

There is no Kafka tarball: the runtime closure of ``org.apache.kafka:kafka_2.13``
is enough to run a KRaft broker, and ``kafka-tools`` (without its transitive
dependencies, which would pull Connect's runtime) adds Kafka's own perf tools
for the benchmarks. The first call resolves them (about 50 MB a version); later
calls find the finished cache and return at once.

Any released version resolves (``kafka_libs("3.9.2")``); the suite runs those of
:data:`SUITE_KAFKA_VERSIONS` (what ``make jars`` fetches): the default for every
cluster, and the compatibility set's newest 4.x and last 3.x (docs/compatibility.md).
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kbackup.core.cache import cache_root
from kbackup.core.errors import KBackupError
from kbackup.core.logs import get_logger

#: The newest 4.x release: the compatibility tests' target, and a source beside the 3.x line.
KAFKA_NEWEST_VERSION = "4.4.0"
#: The version of every local cluster unless a caller names another: the newest release, which
#: passed the whole suite (docs/compatibility.md).
KAFKA_VERSION = KAFKA_NEWEST_VERSION
#: The last 3.x line (KRaft), the older source of the compatibility tests (docs/compatibility.md).
KAFKA_3_VERSION = "3.9.2"
#: The versions the test suite starts, each once, so ``make jars`` resolves them before the tests run.
SUITE_KAFKA_VERSIONS = tuple(dict.fromkeys((KAFKA_VERSION, KAFKA_NEWEST_VERSION, KAFKA_3_VERSION)))
#: Kafka 4.x logs through SLF4J 1.7; log4j-core is already in the broker's closure.
LOG4J_VERSION = "2.25.4"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"

log = get_logger("sandbox.jars")


class JarResolutionError(KBackupError):
    """Maven could not resolve the Kafka jars (no Maven, no network to Maven Central)."""

    exit_code = 1
    kind = "sandbox"


@dataclass(frozen=True)
class MavenArtifact:
    group: str
    artifact: str
    version: str
    #: False: only this jar, none of its dependencies.
    transitive: bool = True
    #: A secondary jar of the artifact (``tests``: its test classes).
    classifier: str | None = None

    def pom_dependency(self) -> str:
        exclusions = (
            "<exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions>"
            if not self.transitive
            else ""
        )
        classifier = f"<classifier>{self.classifier}</classifier>" if self.classifier else ""
        return (
            f"<dependency><groupId>{self.group}</groupId><artifactId>{self.artifact}</artifactId>"
            f"<version>{self.version}</version>{classifier}{exclusions}</dependency>"
        )


def kafka_artifacts(version: str = KAFKA_VERSION) -> list[MavenArtifact]:
    """The broker, Kafka's perf tools, and an SLF4J 1.7 binding."""
    return [
        MavenArtifact("org.apache.kafka", "kafka_2.13", version),
        MavenArtifact("org.apache.kafka", "kafka-tools", version, transitive=False),
        MavenArtifact("org.apache.logging.log4j", "log4j-slf4j-impl", LOG4J_VERSION),
    ]


def _pom(artifacts: Sequence[MavenArtifact]) -> str:
    dependencies = "\n    ".join(artifact.pom_dependency() for artifact in artifacts)
    return f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kbackup.sandbox</groupId>
  <artifactId>resolved-jars</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    {dependencies}
  </dependencies>
</project>
"""


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def resolve_jars(name: str, artifacts: Sequence[MavenArtifact]) -> Path:
    """A folder holding the jars of ``artifacts`` and their runtime closure.

    Resolution runs once per distinct artifact list: the folder's name carries
    a digest of the list, it is filled in a temporary folder and renamed into
    place when complete, and a file lock keeps parallel callers from racing.
    """
    pom = _pom(artifacts)
    digest = hashlib.sha256(pom.encode()).hexdigest()[:12]
    target = cache_root() / f"{name}-{digest}" / "libs"
    if target.is_dir():
        return target
    with _file_lock(cache_root() / f".{name}-{digest}.lock"):
        if target.is_dir():
            return target
        mvn = shutil.which("mvn")
        if mvn is None:
            raise JarResolutionError(
                "Maven (mvn) is needed to fetch Apache Kafka's jars from Maven Central, and is not on PATH",
                hint="install it (Debian: apt-get install maven) and run again",
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
            pom_path = Path(scratch) / "pom.xml"
            pom_path.write_text(pom)
            out_dir = Path(scratch) / "libs"
            command = [
                mvn, "-B", "-q", "-f", str(pom_path),
                f"{DEPENDENCY_PLUGIN}:copy-dependencies",
                "-DincludeScope=runtime", f"-DoutputDirectory={out_dir}",
            ]  # fmt: skip
            log.info("resolving %s jars with Maven into %s", name, target)
            result = subprocess.run(command, capture_output=True, text=True, check=False)
            jars = list(out_dir.glob("*.jar")) if out_dir.is_dir() else []
            if result.returncode != 0 or not jars:
                tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
                raise JarResolutionError(
                    f"Maven could not resolve the {name} jars (exit {result.returncode}):\n{tail}",
                    hint="check that Maven Central is reachable; the cache is at " + str(cache_root()),
                    retryable=True,
                )
            (target.parent / "pom.xml").write_text(pom)
            out_dir.rename(target)
    return target


def kafka_libs(version: str = KAFKA_VERSION) -> Path:
    """The folder of jars that runs a Kafka broker and Kafka's perf tools."""
    return resolve_jars(f"kafka-{version}", kafka_artifacts(version))


def classpath(libs: Path) -> str:
    return str(libs / "*")


def folder_size_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def main(versions: Sequence[str]) -> None:
    """Resolve the jars of ``versions`` (none given: the suite's) and say where each went."""
    for version in versions or SUITE_KAFKA_VERSIONS:
        libs = kafka_libs(version)
        print(f"Apache Kafka {version} jars: {libs} ({folder_size_bytes(libs) / 1e6:.0f} MB)")


if __name__ == "__main__":
    import sys

    try:
        main(sys.argv[1:])
    except JarResolutionError as error:
        sys.exit(f"{error.message}\n{error.hint}")
