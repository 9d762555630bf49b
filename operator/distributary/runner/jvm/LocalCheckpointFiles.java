/*
 * Checkpoint files on a local disk or a volume, written without a process per file.
 *
 * Spark writes each checkpoint file (offsets, commits, state changelogs) to a temporary file that
 * it renames once written. Through Hadoop's local file system each file made also gets its
 * permissions set, and Hadoop without its native library (pyspark's) does that by starting a
 * `chmod` process; it makes a `.crc` file beside each, the same way. This manager is Spark's
 * FileSystem-based one, to which it hands everything else, except that the temporary files and
 * the folders are made by Java itself: no process started, no checksum file. The rename is
 * Spark's (Java's, atomic on a local file system; it refuses to replace a file where Spark asks
 * it not to, and removes a replaced file's checksum file). A file is read the same with or without
 * its checksum file. Paths that are not on the local file system are left to Spark's manager.
 *
 * Set by `distributary.plan.applications.runner_spec.default_spark_conf` for checkpoints on local
 * files; compiled by `distributary.jvm_operators` and by the job image's build.
 */
package dev.distributary.checkpoints;

import java.io.BufferedOutputStream;
import java.io.File;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.file.Files;
import java.util.UUID;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.PathFilter;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager;

public class LocalCheckpointFiles implements CheckpointFileManager {
    /** Spark's manager for the same path, which does all but making files and folders. */
    public static final String SPARK_MANAGER =
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager";
    private static final int BUFFER = 64 * 1024;

    private final CheckpointFileManager spark;
    private final CheckpointFileManager.RenameHelperMethods renames;
    private final FileSystem fs;

    public LocalCheckpointFiles(Path path, Configuration conf) throws Exception {
        spark = (CheckpointFileManager) Class.forName(SPARK_MANAGER)
            .getConstructor(Path.class, Configuration.class)
            .newInstance(path, conf);
        renames = (CheckpointFileManager.RenameHelperMethods) spark;
        fs = path.getFileSystem(conf);
    }

    /** The local file at `path`, or null when the file system is not the local one. */
    private File local(Path path) {
        if (fs instanceof LocalFileSystem) {
            return ((LocalFileSystem) fs).pathToFile(path);
        }
        if (fs instanceof RawLocalFileSystem) {
            return ((RawLocalFileSystem) fs).pathToFile(path);
        }
        return null;
    }

    @Override
    public CheckpointFileManager.CancellableFSDataOutputStream createAtomic(
        Path path, boolean overwriteIfPossible
    ) {
        File target = local(path);
        if (target == null) {
            return spark.createAtomic(path, overwriteIfPossible);
        }
        Path temporary = new Path(path.getParent(), "." + path.getName() + "." + UUID.randomUUID() + ".tmp");
        try {
            File file = local(temporary);
            Files.createDirectories(file.getAbsoluteFile().getParentFile().toPath());
            OutputStream out = new BufferedOutputStream(Files.newOutputStream(file.toPath()), BUFFER);
            return new Renamed(out, temporary, path, overwriteIfPossible);
        } catch (IOException e) {
            throw LocalCheckpointFiles.<RuntimeException>rethrow(e);
        }
    }

    /** The temporary file being written: renamed to its target when closed, deleted if cancelled. */
    private final class Renamed extends CheckpointFileManager.CancellableFSDataOutputStream {
        private final Path temporary;
        private final Path target;
        private final boolean overwrite;
        private boolean done;

        Renamed(OutputStream out, Path temporary, Path target, boolean overwrite) {
            super(out);
            this.temporary = temporary;
            this.target = target;
            this.overwrite = overwrite;
        }

        @Override
        public synchronized void close() throws IOException {
            if (done) {
                return;
            }
            done = true;
            try {
                underlyingStream().close();
                renames.renameTempFile(temporary, target, overwrite);
            } catch (IOException | RuntimeException e) {
                try {
                    spark.delete(temporary);
                } catch (RuntimeException ignored) {
                    // the rename's failure is the one to report
                }
                throw e;
            }
        }

        @Override
        public synchronized void cancel() {
            if (done) {
                return;
            }
            done = true;
            try {
                underlyingStream().close();
            } catch (IOException ignored) {
                // a cancelled file is deleted whatever its stream says
            }
            spark.delete(temporary);
        }
    }

    @Override
    public void mkdirs(Path path) {
        File dir = local(path);
        if (dir == null) {
            spark.mkdirs(path);
            return;
        }
        try {
            Files.createDirectories(dir.toPath());
        } catch (IOException e) {
            throw LocalCheckpointFiles.<RuntimeException>rethrow(e);
        }
    }

    @Override
    public FSDataInputStream open(Path path) {
        return spark.open(path);
    }

    @Override
    public FileStatus[] list(Path path, PathFilter filter) {
        return spark.list(path, filter);
    }

    @Override
    public boolean exists(Path path) {
        return spark.exists(path);
    }

    @Override
    public void delete(Path path) {
        spark.delete(path);
    }

    @Override
    public boolean isLocal() {
        return spark.isLocal();
    }

    @Override
    public Path createCheckpointDirectory() {
        return spark.createCheckpointDirectory();
    }

    @Override
    public void close() {
        spark.close();
    }

    /** Throws `e` as it is (an IOException stays one for Spark's callers), unchecked. */
    @SuppressWarnings("unchecked")
    private static <E extends Throwable> E rethrow(Throwable e) throws E {
        throw (E) e;
    }
}
