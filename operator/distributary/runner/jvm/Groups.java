/*
 * The groups of a view over a table (`distributary/runner/tables.py`), on the JVM, for the
 * aggregates Spark's own streaming aggregation cannot keep exact: MIN, MAX, COUNT(DISTINCT), and
 * SUM and AVG of doubles. Per group, in its state: a count of rows; per aggregate, a count of its
 * non-null arguments and their exact sum (decimal text: a double's value is a finite decimal, so
 * doubles add up without rounding until written); for MIN, MAX and COUNT(DISTINCT), the count of
 * each value, so that a deleted value gives way to the next one.
 *
 * Input rows: weighted changes (the group's columns, the arguments, and the weight: +1 a row
 * joins the group, -1 it leaves). Each group a batch touched is written with its aggregates, or
 * flagged gone when no row is left in it (a query without GROUP BY keeps its one group, with a
 * count of 0). Results are typed as Spark types them: an average of decimals is divided to 100
 * digits and rounded half up to its scale, a double rounded once.
 *
 * Compiled by `distributary.jvm_operators` against Spark's own jars (pyspark's), and by the job
 * image's build.
 */
package dev.distributary.tables;

import java.math.BigDecimal;
import java.math.BigInteger;
import java.math.MathContext;
import java.math.RoundingMode;
import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.MapState;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.streaming.ValueState;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

import scala.jdk.javaapi.CollectionConverters;

public final class Groups extends StatefulProcessor<Row, Row, Row> {
    private static final long serialVersionUID = 1L;
    private static final MathContext QUOTIENT = new MathContext(100, RoundingMode.HALF_EVEN);
    private static final StructType COUNT = DataTypes.createStructType(
            new StructField[] {DataTypes.createStructField("c", DataTypes.LongType, true)});

    private final boolean global;
    private final boolean constant;
    private final String[] functions;
    private final int[] arguments; // -1: COUNT(*)
    private final DataType[] argumentTypes;
    private final DataType[] results;
    private final int weight;
    private transient ValueState<Row> totals;
    private transient MapState<Row, Row>[] values;

    private Groups(StructType input, boolean global, boolean constant, List<String> functions,
                   List<String> arguments, List<String> results, String weight) {
        this.global = global;
        this.constant = constant;
        int count = functions.size();
        this.functions = functions.toArray(new String[0]);
        this.arguments = new int[count];
        this.argumentTypes = new DataType[count];
        this.results = new DataType[count];
        for (int i = 0; i < count; i++) {
            String argument = arguments.get(i);
            this.arguments[i] = argument.isEmpty() ? -1 : input.fieldIndex(argument);
            this.argumentTypes[i] = argument.isEmpty() ? DataTypes.LongType
                    : input.fields()[this.arguments[i]].dataType();
            this.results[i] = DataType.fromJson(results.get(i));
        }
        this.weight = input.fieldIndex(weight);
    }

    /**
     * The groups of `changes` by the columns `groups`; `global`: a query without GROUP BY, whose
     * one group stays when it has no row left (by no column: one group); aggregate `i` is
     * `functions[i]` ("count", "count_distinct", "sum", "avg", "min", "max") of column
     * `arguments[i]` ("" for COUNT(*)), of Spark type `results[i]` (JSON); `weight` the weight's
     * column, `output` the schema written (the groups, the aggregates, the gone flag).
     */
    public static Dataset<Row> apply(Dataset<Row> changes, List<String> groups, boolean global,
                                     List<String> functions, List<String> arguments,
                                     List<String> results, String weight, String output,
                                     String mode) {
        Groups processor = new Groups(changes.schema(), global, groups.isEmpty(), functions,
                arguments, results, weight);
        return Support.groupedBy(changes, groups).transformWithState(processor, TimeMode.None(),
                Support.mode(mode), Encoders.row((StructType) DataType.fromJson(output)));
    }

    @Override
    @SuppressWarnings({"unchecked", "rawtypes"})
    public void init(OutputMode outputMode, TimeMode timeMode) {
        List<StructField> fields = new ArrayList<>();
        fields.add(DataTypes.createStructField("rows", DataTypes.LongType, true));
        for (int i = 0; i < functions.length; i++) {
            fields.add(DataTypes.createStructField("n" + i, DataTypes.LongType, true));
            fields.add(DataTypes.createStructField("s" + i, DataTypes.StringType, true));
        }
        totals = getHandle().getValueState("totals",
                Encoders.row(DataTypes.createStructType(fields)), TTLConfig.NONE());
        values = new MapState[functions.length];
        for (int i = 0; i < functions.length; i++) {
            if (keepsValues(i)) {
                StructType value = DataTypes.createStructType(new StructField[] {
                    DataTypes.createStructField("v", argumentTypes[i], true)});
                values[i] = getHandle().getMapState("values" + i, Encoders.row(value),
                        Encoders.row(COUNT), TTLConfig.NONE());
            }
        }
    }

    private boolean keepsValues(int index) {
        String function = functions[index];
        return function.equals("min") || function.equals("max")
                || function.equals("count_distinct");
    }

    @Override
    public scala.collection.Iterator<Row> handleInputRows(
            Row key, scala.collection.Iterator<Row> records, TimerValues timerValues) {
        int count = functions.length;
        long rows = 0;
        long[] counts = new long[count];
        BigDecimal[] sums = new BigDecimal[count];
        java.util.Arrays.fill(sums, BigDecimal.ZERO);
        if (totals.exists()) {
            Row stored = totals.get();
            rows = stored.isNullAt(0) ? 0 : stored.getLong(0);
            for (int i = 0; i < count; i++) {
                counts[i] = stored.isNullAt(1 + 2 * i) ? 0 : stored.getLong(1 + 2 * i);
                sums[i] = stored.isNullAt(2 + 2 * i) ? BigDecimal.ZERO
                        : exact(stored.getString(2 + 2 * i));
            }
        }
        for (Row record : (Iterable<Row>) () -> CollectionConverters.asJava(records)) {
            long w = record.getLong(weight);
            rows += w;
            for (int i = 0; i < count; i++) {
                Object value = arguments[i] < 0 ? Long.valueOf(1) : record.get(arguments[i]);
                if (value == null) {
                    continue;
                }
                counts[i] += w;
                if (functions[i].equals("sum") || functions[i].equals("avg")) {
                    sums[i] = sums[i].add(exact(value).multiply(BigDecimal.valueOf(w)));
                }
                if (values[i] != null) {
                    countValue(values[i], value, w);
                }
            }
        }
        boolean gone = rows <= 0 && !global;
        if (gone) {
            totals.clear();
            for (MapState<Row, Row> state : values) {
                if (state != null) {
                    state.clear();
                }
            }
        } else {
            Object[] written = new Object[1 + 2 * count];
            written[0] = rows;
            for (int i = 0; i < count; i++) {
                written[1 + 2 * i] = counts[i];
                written[2 + 2 * i] = sums[i].toPlainString();
            }
            totals.update(RowFactory.create(written));
        }
        Object[] aggregates = new Object[count];
        for (int i = 0; i < count && !gone; i++) {
            aggregates[i] = result(i, counts[i], sums[i]);
        }
        Object[] row = Support.concat(Support.parts(key, constant), aggregates,
                new Object[] {gone});
        return CollectionConverters.asScala(List.of(RowFactory.create(row)).iterator());
    }

    private Object result(int index, long count, BigDecimal sum) {
        switch (functions[index]) {
            case "count":
                return count;
            case "count_distinct":
            case "min":
            case "max": {
                List<Object> present = new ArrayList<>();
                CollectionConverters.asJava(values[index].keys())
                        .forEachRemaining(k -> present.add(k.get(0)));
                if (functions[index].equals("count_distinct")) {
                    return (long) present.size();
                }
                if (present.isEmpty()) {
                    return null;
                }
                return functions[index].equals("min") ? java.util.Collections.min(present,
                        Support.ORDER) : java.util.Collections.max(present, Support.ORDER);
            }
            default: {
                if (count == 0) {
                    return null;
                }
                BigDecimal exact = functions[index].equals("sum") ? sum
                        : sum.divide(BigDecimal.valueOf(count), QUOTIENT);
                return typed(exact, results[index]);
            }
        }
    }

    /** An exact value as Spark's type `kind`: a double rounded once, a decimal to its scale. */
    static Object typed(BigDecimal value, DataType kind) {
        if (kind instanceof DoubleType || kind instanceof FloatType) {
            return value.doubleValue();
        }
        if (kind instanceof DecimalType decimal) {
            return value.round(QUOTIENT).setScale(decimal.scale(), RoundingMode.HALF_UP);
        }
        return value.toBigInteger().longValueExact();
    }

    /** A value's exact decimal; stored text is a decimal, or a fraction of two integers. */
    static BigDecimal exact(Object value) {
        if (value instanceof BigDecimal decimal) {
            return decimal;
        }
        if (value instanceof Double || value instanceof Float) {
            double number = ((Number) value).doubleValue();
            if (Double.isNaN(number) || Double.isInfinite(number)) {
                throw new ArithmeticException("SUM and AVG over a table keep exact sums, and "
                        + number + " has none: filter it out in the view's WHERE");
            }
            return new BigDecimal(number);
        }
        if (value instanceof String text) {
            int slash = text.indexOf('/');
            if (slash < 0) {
                return new BigDecimal(text);
            }
            // A fraction's denominator is a power of two (sums of doubles): its decimal ends.
            return new BigDecimal(new BigInteger(text.substring(0, slash)))
                    .divide(new BigDecimal(new BigInteger(text.substring(slash + 1))));
        }
        return BigDecimal.valueOf(((Number) value).longValue());
    }

    private static void countValue(MapState<Row, Row> state, Object value, long weight) {
        Row key = RowFactory.create(value);
        long count = (state.containsKey(key) ? state.getValue(key).getLong(0) : 0) + weight;
        if (count > 0) {
            state.updateValue(key, RowFactory.create(count));
        } else if (state.containsKey(key)) {
            state.removeKey(key);
        }
    }
}
