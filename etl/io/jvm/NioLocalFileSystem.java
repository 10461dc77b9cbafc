/*
 * The local file system of Hadoop without a process per call.
 *
 * Without Hadoop's native library (pyspark ships none), RawLocalFileSystem runs a shell command
 * for two calls Delta makes on every commit and Spark on every file it writes: `chmod` to set a
 * created file's or directory's permission, and `readlink` to ask whether a path is a link before
 * a rename (FileContext, which Delta's log store uses): 48 processes per append to a small Delta
 * table (docs/decisions/local-files-without-a-shell.md). Here both go through
 * java.nio instead; everything else, the answers included, is Hadoop's own.
 *
 * Configured by etl.core.spark_conf (setting spark_local_fs_nio):
 *   fs.file.impl                    = activedw.hadoop.NioLocalFileSystem     (FileSystem API, with checksums)
 *   fs.AbstractFileSystem.file.impl = activedw.hadoop.NioLocalFileSystem$Fs  (FileContext API, with checksums)
 */
package activedw.hadoop;

import java.io.File;
import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFs;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FsServerDefaults;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.local.LocalConfigKeys;
import org.apache.hadoop.fs.permission.FsPermission;

public class NioLocalFileSystem extends LocalFileSystem {
  public NioLocalFileSystem() {
    super(new Raw());
  }

  /** RawLocalFileSystem with its two shell calls done in-process. */
  public static class Raw extends RawLocalFileSystem {
    private static final PosixFilePermission[] BITS = {
      PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_READ,
      PosixFilePermission.GROUP_EXECUTE, PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_READ,
      PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_READ,
    };

    @Override
    public void setPermission(Path p, FsPermission permission) throws IOException {
      int mode = permission.toShort();
      if ((mode & ~0777) != 0) {  // a sticky bit: Hadoop's own chmod
        super.setPermission(p, permission);
        return;
      }
      Set<PosixFilePermission> set = EnumSet.noneOf(PosixFilePermission.class);
      for (int bit = 0; bit < BITS.length; bit++) {
        if ((mode & (1 << bit)) != 0) {
          set.add(BITS[bit]);
        }
      }
      try {
        Files.setPosixFilePermissions(pathToFile(p).toPath(), set);
      } catch (UnsupportedOperationException e) {  // not a POSIX file system
        super.setPermission(p, permission);
      }
    }

    @Override
    public FileStatus getFileLinkStatus(Path f) throws IOException {
      File file = pathToFile(f);
      if (Files.isSymbolicLink(file.toPath())) {
        return super.getFileLinkStatus(f);  // a link (rare): Hadoop's own answer
      }
      return getFileStatus(f);  // what Hadoop answers for a path that is not a link
    }
  }

  /** The FileContext side (Hadoop's LocalFs: checksums over RawLocalFs), on Raw. */
  public static class Fs extends ChecksumFs {
    public Fs(URI uri, Configuration conf) throws IOException, URISyntaxException {
      super(new RawFs(uri, conf));
    }
  }

  /** Hadoop's RawLocalFs, delegating to Raw. */
  public static class RawFs extends DelegateToFileSystem {
    public RawFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
      super(uri, new Raw(), conf, "file", false);
    }

    @Override
    public int getUriDefaultPort() {
      return -1;
    }

    @Override
    @SuppressWarnings("deprecation")
    public FsServerDefaults getServerDefaults() throws IOException {
      return LocalConfigKeys.getServerDefaults();
    }

    @Override
    public FsServerDefaults getServerDefaults(Path f) throws IOException {
      return LocalConfigKeys.getServerDefaults();
    }

    @Override
    public boolean isValidName(String src) {
      return true;
    }
  }
}
